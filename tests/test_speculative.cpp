// Stage 6: speculative decoding. The target checks every guess, so greedy output with any drafter
// is byte-identical to plain greedy output (50 prompts per architecture and drafter, including a
// drafter that is nearly always wrong), and sampled output keeps the target's distribution
// (chi-square tests of the rejection rule alone and end to end on a tiny model). The default
// suite runs 10 of the prompts and 4,000 draws; all 50 and 20,000 are tagged [slow]
// (scripts/test.sh --slow).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "sampled_speculation.hpp"
#include "test_util.hpp"

using namespace deltafin;

namespace {

// Guesses uniformly random tokens: nearly always rejected, so every step exercises rollback.
class RandomDrafter final : public Drafter {
 public:
  explicit RandomDrafter(int64_t vocab) : vocab_(vocab) {}
  std::string name() const override { return "random"; }
  Draft propose(std::span<const int32_t>, int k) override {
    Draft d;
    for (int i = 0; i < k; ++i) d.tokens.push_back(static_cast<int32_t>(rng_() % vocab_));
    return d;
  }

 private:
  int64_t vocab_;
  std::mt19937_64 rng_{7};
};

// Another drafter's guesses with a confidence head that says `confidence` for every guess: the
// adaptive loop then asks for max_k and lets the calibrated confidences cut the draft.
class ConfidentDrafter final : public Drafter {
 public:
  ConfidentDrafter(Drafter& inner, double confidence) : inner_(inner), confidence_(confidence) {}
  std::string name() const override { return "confident " + inner_.name(); }
  Draft propose(std::span<const int32_t> context, int k) override {
    Draft d = inner_.propose(context, k);
    d.confidence.assign(d.tokens.size(), confidence_);
    return d;
  }

 private:
  Drafter& inner_;
  double confidence_;
};

std::unique_ptr<Engine> open(const std::string& dir, int threads = 2) {
  EngineOptions o;
  o.model_dir = dir;
  o.threads = threads;
  o.cache_gb = 0.5;
  return Engine::open(o);
}

// A fixed list of 50 prompts of 3-12 ids; every fifth repeats a phrase so that prompt lookup finds
// matches. The quick set is those ten.
enum class PromptSet { kQuick, kAll };

std::vector<std::vector<int32_t>> prompts(int64_t vocab, PromptSet set) {
  std::mt19937_64 rng(1234);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 50; ++i) {
    std::vector<int32_t> p(3 + rng() % 10);
    for (int32_t& t : p) t = static_cast<int32_t>(1 + rng() % (vocab - 1));
    if (i % 5 == 0) p.insert(p.end(), p.begin(), p.end());
    if (set == PromptSet::kAll || i % 5 == 0) out.push_back(p);
  }
  return out;
}

// Greedy generation of n tokens after `prompt`, through the speculative decoder.
std::vector<int32_t> generate(Engine& engine, Drafter* drafter, const std::vector<int32_t>& prompt, int n, int k,
                              SpeculativeStats* stats = nullptr, bool adaptive = false) {
  auto session = engine.new_session();
  Sampler sampler(SamplerOptions{});
  SpeculativeDecoder decoder(*session, drafter, sampler, engine.summary().vocab_size, {k, adaptive});
  std::vector<int32_t> context = prompt;
  context.push_back(sampler.sample(session->append(prompt, false)));
  while (static_cast<int>(context.size() - prompt.size()) < n)
    for (int32_t t : decoder.step(context)) context.push_back(t);
  if (stats) *stats = decoder.stats();
  return std::vector<int32_t>(context.begin() + static_cast<std::ptrdiff_t>(prompt.size()),
                              context.begin() + static_cast<std::ptrdiff_t>(prompt.size()) + n);
}

void check_identical(const std::string& target_dir, const std::string& draft_dir, PromptSet set) {
  auto target = open(test::fixture(target_dir));
  const int64_t vocab = target->summary().vocab_size;
  auto ngram = make_ngram_drafter();
  auto model = make_model_drafter(open(test::fixture(draft_dir)), SamplerOptions{});
  RandomDrafter random(vocab);
  ConfidentDrafter confident(*model, 0.9);
  SpeculativeStats s_ngram, s_model, s_random, total_model{}, total_ngram{}, total_random{};
  int identical = 0, n = 0;
  for (const auto& prompt : prompts(vocab, set)) {
    const auto plain = generate(*target, nullptr, prompt, 20, 0);
    const auto a = generate(*target, ngram.get(), prompt, 20, 6, &s_ngram);
    const auto b = generate(*target, model.get(), prompt, 20, 4, &s_model);
    const auto c = generate(*target, &random, prompt, 20, 3, &s_random);
    const auto d = generate(*target, &confident, prompt, 20, 4, nullptr, true);  // adaptive, cut by confidence
    identical += (a == plain) + (b == plain) + (c == plain) + (d == plain);
    n += 4;
    total_ngram.drafted += s_ngram.drafted, total_ngram.accepted += s_ngram.accepted;
    total_model.drafted += s_model.drafted, total_model.accepted += s_model.accepted;
    total_random.drafted += s_random.drafted, total_random.accepted += s_random.accepted;
  }
  INFO(target_dir << " drafted/accepted: ngram " << total_ngram.drafted << "/" << total_ngram.accepted << ", model "
                  << total_model.drafted << "/" << total_model.accepted << ", random " << total_random.drafted << "/"
                  << total_random.accepted);
  CHECK(identical == n);
  // The drafters really guessed, and (over all 50 prompts) both outcomes happened.
  CHECK(total_model.drafted > 0);
  if (set == PromptSet::kAll) {
    CHECK(total_ngram.drafted > 0);
    CHECK(total_model.accepted > 0);
  }
  if (draft_dir != target_dir) CHECK(total_model.accepted < total_model.drafted);
  CHECK(total_random.accepted < total_random.drafted);
}

}  // namespace

// The same checks on the 10 quick prompts (default suite) and on all 50 ([slow]).
#define SPECULATIVE_EQUALS_PLAIN(name, check)                                                                      \
  TEST_CASE("speculative greedy = plain greedy on 10 prompts: " name, "[speculative]") { check(PromptSet::kQuick); } \
  TEST_CASE("speculative greedy = plain greedy on 50 prompts: " name, "[speculative][slow]") { check(PromptSet::kAll); }

namespace {

void k2_with_a_k3_draft(PromptSet r) { check_identical("k2_tiny", "k3_tiny", r); }  // another architecture, one vocabulary
void dsv3_drafting_for_itself(PromptSet r) { check_identical("dsv3_tiny", "dsv3_tiny", r); }  // every guess holds
void k3_with_an_int4_draft(PromptSet r) { check_identical("k3_tiny_mxfp4", "k2_tiny_int4", r); }

void bundled_with_its_draft(PromptSet set) {
  const std::string models = deltafin::test::fixtures_dir() + "/../../models/";
  auto target = open(models + "default");
  auto ngram = make_ngram_drafter();
  auto model = make_model_drafter(open(models + "default-draft"), SamplerOptions{});
  SpeculativeStats s;
  uint64_t drafted = 0, accepted = 0;
  int identical = 0;
  const auto all = prompts(target->summary().vocab_size, set);
  for (const auto& prompt : all) {
    const auto plain = generate(*target, nullptr, prompt, 16, 0);
    identical += generate(*target, ngram.get(), prompt, 16, 6) == plain;
    identical += generate(*target, model.get(), prompt, 16, 4, &s) == plain;
    identical += generate(*target, ngram.get(), prompt, 16, 4, nullptr, true) == plain;  // adaptive k
    drafted += s.drafted;
    accepted += s.accepted;
  }
  INFO("bundled draft: " << accepted << " of " << drafted << " guesses accepted");
  CHECK(identical == 3 * static_cast<int>(all.size()));
  CHECK(accepted > 0);
}

}  // namespace

SPECULATIVE_EQUALS_PLAIN("K2 (bf16, q-LoRA, YaRN)", k2_with_a_k3_draft)
SPECULATIVE_EQUALS_PLAIN("DeepSeek-V3 (group-limited routing)", dsv3_drafting_for_itself)
SPECULATIVE_EQUALS_PLAIN("Kimi K3 (KDA state restored on rollback)", k3_with_an_int4_draft)
SPECULATIVE_EQUALS_PLAIN("the bundled model with its bundled draft", bundled_with_its_draft)

TEST_CASE("rejection rule keeps the target distribution (synthetic p and q, chi-square)", "[speculative]") {
  // Target logits for 6 tokens at temperature 1; the draft's q differs a lot from p.
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f, /* bonus row */ 0, 0, 0, 0, 0, 0};
  Sampler sampler(SamplerOptions{1.0f, 0, 1.0f, 0.0f, 42});
  const std::vector<double> p = sampler.distribution(std::vector<float>(logits.begin(), logits.begin() + 6));
  const std::vector<double> q = {0.05, 0.05, 0.4, 0.3, 0.1, 0.1};
  std::mt19937_64 rng(9);
  std::discrete_distribution<int32_t> draw_q(q.begin(), q.end());
  for (bool deterministic : {false, true}) {
    std::vector<uint64_t> counts(6, 0);
    const uint64_t draws = 200000;
    for (uint64_t i = 0; i < draws; ++i) {
      Draft d;
      if (deterministic) {
        d.tokens = {static_cast<int32_t>(i % 6)};  // a fixed guess: one-hot q
      } else {
        d.tokens = {draw_q(rng)};
        d.q = {q};
      }
      ++counts[verify_drafts(d, logits, 6, sampler).front()];
    }
    INFO((deterministic ? "one-hot q" : "sampled q") << ": chi-square " << test::chi_square(counts, p, draws));
    CHECK(test::chi_square(counts, p, draws) < test::chi_square_limit(5));
  }
}

namespace {

// End to end on k2_tiny: the first token of each speculative step, drawn `draws` times from one
// state, against the target's exact distribution.
void check_sampled_distribution(uint64_t draws) {
  auto target = open(test::fixture("k2_tiny"), 1);  // tiny matrices: one thread is fastest
  const SamplerOptions sampling{1.0f, 8, 1.0f, 0.0f, 5};  // temperature 1, top-k 8: a small vocabulary
  auto drafter = make_model_drafter(open(test::fixture("k3_tiny"), 1), sampling);
  const test::SampledSpeculation r = test::sample_first_tokens(*target, *drafter, sampling, {5, 17, 99, 4}, 42, 2, draws);
  INFO("chi-square " << r.chi_square << " over " << r.support << " tokens; draft accepted " << r.stats.accepted << " of "
                     << r.stats.drafted);
  CHECK(r.stats.accepted > 0);
  CHECK(r.stats.accepted < r.stats.drafted);
  CHECK(r.chi_square < r.limit);
}

TEST_CASE("prompt lookup proposes what followed the latest earlier match", "[speculative]") {
  auto ngram = make_ngram_drafter();
  const std::vector<int32_t> context = {1, 2, 3, 4, 9, 1, 2, 3, 4, 7, 8, 1, 2, 3};
  CHECK(ngram->propose(context, 3).tokens == std::vector<int32_t>{4, 7, 8});  // the latest "1 2 3" match
  CHECK(ngram->propose(context, 1).tokens == std::vector<int32_t>{4});
  CHECK(ngram->propose(std::vector<int32_t>{1, 2, 3, 5}, 4).tokens.empty());  // no earlier match
}

}  // namespace

TEST_CASE("sampled speculative decoding draws from the target distribution (k2_tiny, 4,000 draws)", "[speculative]") {
  check_sampled_distribution(4000);
}

TEST_CASE("sampled speculative decoding draws from the target distribution (k2_tiny, 20,000 draws)", "[speculative][slow]") {
  check_sampled_distribution(20000);
}
