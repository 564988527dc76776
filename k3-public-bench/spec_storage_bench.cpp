// Speculative decoding on a storage-bound model, with drafts of controlled acceptance: what do
// accepted guesses buy, and what do rejected ones cost, when every pass streams its experts?
// A scripted drafter proposes the target's own greedy continuation (found by a plain run first),
// each guess replaced by a wrong token with probability 1 - ACCEPT. Every arm opens a fresh engine
// (cold expert cache) and must generate the plain run's ids. Prints one JSON object per arm.
// With MEMORY_GB (--memory-gb) the spine may stream: a verify pass reads it once for all its
// positions, so spine bytes per committed token fall with acceptance (issue 16).
// Usage: spec_storage_bench MODEL PLACEMENT CACHE_GB TOKENS [MEMORY_GB]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "spec_generation.hpp"

using namespace deltafin;

namespace {

class ScriptedDrafter final : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> script, size_t prompt, double accept)
      : script_(std::move(script)), prompt_(prompt), accept_(accept) {}
  std::string name() const override { return "scripted"; }
  Draft propose(std::span<const int32_t> context, int k) override {
    Draft d;
    for (size_t i = context.size() - prompt_; i < script_.size() && static_cast<int>(d.tokens.size()) < k; ++i)
      d.tokens.push_back(coin_(rng_) < accept_ ? script_[i] : (script_[i] + 1) % 1000);
    return d;
  }

 private:
  std::vector<int32_t> script_;  // the greedy continuation, the first token included
  size_t prompt_;
  double accept_;
  std::mt19937_64 rng_{11};
  std::uniform_real_distribution<double> coin_{0.0, 1.0};
};


}  // namespace

int run(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: spec_storage_bench MODEL PLACEMENT CACHE_GB TOKENS [MEMORY_GB]\n");
    return 2;
  }
  EngineOptions o;
  o.model_dir = argv[1];
  o.placement = argv[2];
  o.cache_gb = std::atof(argv[3]);
  const int tokens = std::atoi(argv[4]);
  if (argc == 6) o.memory_gb = std::atof(argv[5]);
  std::vector<int32_t> prompt;
  for (int i = 1; i <= 16; ++i) prompt.push_back(i);

  const bench::SpecRun plain = bench::timed_generation(o, prompt, tokens, nullptr, {0, false});
  auto report = [&](const char* arm, double accept, int k, bool adaptive, const bench::SpecRun& r) {
    const uint64_t bytes = r.after.expert_bytes_read - r.before.expert_bytes_read;
    const uint64_t spine = r.after.spine_bytes_read - r.before.spine_bytes_read;
    const uint64_t committed = r.spec.committed;
    std::printf("{\"arm\": \"%s\", \"accept\": %.2f, \"k\": %d, \"adaptive\": %s, \"tok_s\": %.4f, \"plain_tok_s\": %.4f, "
                "\"steps\": %llu, \"drafted\": %llu, \"accepted\": %llu, \"committed\": %llu, \"bytes_per_token\": %.0f, "
                "\"spine_bytes_per_token\": %.0f, \"experts_per_pass\": %.2f, \"same_ids\": %s}\n",
                arm, accept, k, adaptive ? "true" : "false", committed / r.seconds, plain.spec.committed / plain.seconds,
                static_cast<unsigned long long>(r.spec.steps), static_cast<unsigned long long>(r.spec.drafted),
                static_cast<unsigned long long>(r.spec.accepted), static_cast<unsigned long long>(committed),
                static_cast<double>(bytes) / committed, static_cast<double>(spine) / committed,
                static_cast<double>(r.after.expert_runs - r.before.expert_runs) / r.spec.steps,
                r.ids == plain.ids ? "true" : "false");
    std::fflush(stdout);
  };
  report("plain", 0, 0, false, plain);
  std::vector<int32_t> script(plain.ids.begin(), plain.ids.end());
  for (double accept : {1.0, 0.7, 0.0}) {
    for (int k : {1, 2, 4}) {
      ScriptedDrafter drafter(script, prompt.size(), accept);
      report("fixed-k", accept, k, false, bench::timed_generation(o, prompt, tokens, &drafter, {k, false}));
    }
    ScriptedDrafter drafter(script, prompt.size(), accept);
    report("adaptive", accept, 4, true, bench::timed_generation(o, prompt, tokens, &drafter, {4, true}));
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spec_storage_bench: %s\n", e.what());
    return 1;
  }
}
