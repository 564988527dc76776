// The speculative loop's cost model (decode/verify_cost.hpp, decode/speculative.hpp): the expected
// union of experts of n consecutive positions from a known routing sequence, the price of a pass,
// the choice of k from calibrated confidences on synthetic pass costs, the engine's per-pass expert
// statistics, and a loop that turns itself off when its drafter's acceptance falls (a scripted
// drafter over a timed fake target), with the target's tokens unchanged.
#include <catch2/catch.hpp>

#include <chrono>
#include <random>
#include <thread>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "decode/verify_cost.hpp"
#include "test_util.hpp"

using namespace deltafin;

TEST_CASE("the expected union of n consecutive positions comes from sliding windows of the routing", "[spec-cost]") {
  ExpertUnionWindow w(3);
  CHECK(w.expected_pairs(1) == 0);
  const std::vector<std::vector<uint64_t>> routing = {{1, 2}, {2, 3}, {3, 4}, {1, 4}, {5}};
  for (size_t p = 0; p < routing.size(); ++p) w.add(static_cast<int64_t>(p), routing[p]);
  CHECK(w.expected_pairs(1) == Approx(9.0 / 5));  // 2 2 2 2 1
  CHECK(w.expected_pairs(2) == Approx(3.0));      // {1,2,3} {2,3,4} {1,3,4} {1,4,5}
  CHECK(w.expected_pairs(3) == Approx(4.0));      // {1,2,3,4} {1,2,3,4} {1,3,4,5}
  CHECK(w.expected_pairs(5) == Approx(6.0));      // past the widest window: the last increment (1) repeated
  // A position that does not follow the previous one starts new windows; the old ones stay.
  w.add(10, {7, 8, 9});
  CHECK(w.expected_pairs(1) == Approx(12.0 / 6));
  CHECK(w.expected_pairs(2) == Approx(3.0));
}

TEST_CASE("a pass is priced from its reads: the spine once, the union of experts, compute per position", "[spec-cost]") {
  PassPrices p;
  p.plain_seconds = 1.0;
  p.measured = {0, 1.0, 0, 0, 0};
  p.read_bytes = {0, 100, 150, 180, 200};  // spine 60 + union pairs x 10 bytes: 4, 9, 12, 14 pairs
  p.seconds_per_byte = 0.01;
  p.position_seconds = 0.05;
  CHECK(pass_seconds(p, 1) == Approx(1.0));
  CHECK(pass_seconds(p, 2) == Approx(1.0 + 0.5 + 0.05));
  CHECK(pass_seconds(p, 4) == Approx(1.0 + 1.0 + 0.15));
  p.measured[3] = 1.3;  // a measured width overrides the model
  CHECK(pass_seconds(p, 3) == Approx(1.3));
}

TEST_CASE("calibrated confidences choose k on synthetic pass costs", "[spec-cost]") {
  PassPrices p;
  p.plain_seconds = 1.0;
  p.measured = {0, 1.0, 1.25, 1.5, 1.75, 2.0};  // every width measured: t(n) = 1 + 0.25 (n - 1)
  p.read_bytes.assign(6, 0.0);
  const std::vector<double> none(5, 0.0);
  const std::vector<double> confidence = {0.95, 0.95, 0.1, 0.9};
  // E(k) = 1, 1.95, 2.85, 2.94, 3.02 over t = 1, 1.25, 1.5, 1.75, 2: k = 2 (1.90 tokens/s).
  std::deque<std::pair<double, bool>> window;
  WidthChoice c = best_width(p, expected_committed(calibrated(confidence, window)), none, 1.1);
  CHECK(c.k == 2);
  CHECK(c.rate == Approx(2.8525 / 1.5));
  // A drafter more confident than it turns out to be: scaled by 12 / 28.9, one guess pays best
  // (E = 1, 1.39, 1.55 over t = 1, 1.25, 1.5).
  for (int i = 0; i < 31; ++i) window.emplace_back(0.9, i % 3 == 0);  // 11 of 31 held, predicted 0.9 each
  const std::vector<double> scaled = calibrated(confidence, window);
  CHECK(scaled[0] == Approx(0.95 * 12.0 / 28.9));
  CHECK(best_width(p, expected_committed(scaled), none, 1.1).k == 1);
  // Nearly nothing holds: no guess pays.
  window.clear();
  for (int i = 0; i < 32; ++i) window.emplace_back(0.9, i % 16 == 0);
  CHECK(best_width(p, expected_committed(calibrated(confidence, window)), none, 1.1).k == 0);
  // Underconfident: scaled up, clamped at 1.
  window.clear();
  for (int i = 0; i < 32; ++i) window.emplace_back(0.3, true);
  CHECK(calibrated(confidence, window)[0] == 1.0);
  // Draft time counts: guesses that cost a second each do not pay.
  const std::vector<double> slow = {0, 1, 2, 3, 4};
  CHECK(best_width(p, expected_committed(confidence), slow, 1.1).k == 0);
  // A width never measured is taken only with the exploration gain.
  p.measured = {0, 1.0, 0, 0, 0, 0};
  p.position_seconds = 0.25;
  CHECK(best_width(p, expected_committed(confidence), none, 1.1).k == 2);
  CHECK(best_width(p, expected_committed(confidence), none, 2.0).k == 0);
}

TEST_CASE("a rejection's expected replay: the pending token and the guesses held before it", "[spec-cost]") {
  // k = 1: fails with 0.5, replaying 1; k = 2: + 0.5 x 0.2 x 2; k = 3: + 0.4 x 1 x 3.
  const std::vector<double> r = expected_replayed(std::vector<double>{0.5, 0.8, 0.0});
  REQUIRE(r.size() == 4);
  CHECK(r[0] == 0);
  CHECK(r[1] == Approx(0.5));
  CHECK(r[2] == Approx(0.7));
  CHECK(r[3] == Approx(1.9));
}

TEST_CASE("a session reports its last pass's experts: positions, selections, the union", "[spec-cost]") {
  EngineOptions o;
  o.model_dir = test::fixture("k2_tiny");
  o.threads = 2;
  o.cache_gb = 0.5;
  auto engine = Engine::open(o);
  auto session = engine->new_session();
  session->append(std::vector<int32_t>{5, 17, 99, 4}, false);
  session->append(std::vector<int32_t>{42}, true, PassKind::Decode);
  const PassExperts one = session->last_pass_experts();
  CHECK(one.positions == 1);
  const uint64_t per_position = one.selections;
  CHECK(per_position > 0);
  CHECK(one.pairs.size() == per_position);  // one position: its choices are distinct
  CHECK(std::is_sorted(one.pairs.begin(), one.pairs.end()));
  CHECK(one.bytes > 0);
  session->append(std::vector<int32_t>{7, 8, 9}, true, PassKind::Verify);
  const PassExperts three = session->last_pass_experts();
  CHECK(three.positions == 3);
  CHECK(three.selections == 3 * per_position);
  CHECK(three.pairs.size() <= three.selections);
  CHECK(three.pairs.size() >= per_position);
  CHECK(std::adjacent_find(three.pairs.begin(), three.pairs.end()) == three.pairs.end());
}

namespace {

constexpr int64_t kVocab = 64;

// The target's greedy token at position q (what the fake target's logits pick).
int32_t token_at(int64_t q) { return static_cast<int32_t>((q * 7 + 3) % kVocab); }

// A target whose row for position q picks token_at(q + 1). A pass sleeps 1 ms, 1 ns a byte read
// (1 MB of spine, 100 KB per distinct expert pair: position q routes to pairs q..q+3) and 0.6 ms a
// position beyond the first: extra positions cost more than a guess accepted 1 time in 10 brings.
class TimedSession final : public Session {
 public:
  std::vector<float> append(std::span<const int32_t> tokens, bool all_logits, PassKind) override {
    const int64_t n = static_cast<int64_t>(tokens.size());
    last_ = {n, static_cast<uint64_t>(4 * n), {}, 0, 0};
    for (int64_t i = 0; i < n + 3; ++i) last_.pairs.push_back(static_cast<uint64_t>(position_ + i));
    last_.bytes = last_.missed = 0;
    const uint64_t expert_bytes = last_.pairs.size() * 100000;
    reads_.spine += 1000000;
    reads_.experts += expert_bytes;
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + (1000000 + expert_bytes) / 1000 + 600 * (n - 1)));
    std::vector<float> logits(static_cast<size_t>((all_logits ? n : 1) * kVocab), 0.0f);
    for (int64_t i = all_logits ? 0 : n - 1, row = 0; i < n; ++i, ++row) logits[row * kVocab + token_at(position_ + i + 1)] = 10.0f;
    position_ += n;
    return logits;
  }
  int64_t position() const override { return position_; }
  uint64_t state_bytes() const override { return 0; }
  void rewind(int64_t pos) override { position_ = pos; }
  StorageReads storage_reads() const override { return reads_; }
  PassExperts last_pass_experts() const override { return last_; }
  std::vector<std::byte> save_state() override { return {}; }
  void load_state(std::span<const int32_t>, std::span<const std::byte>) override {}

 private:
  int64_t position_ = 0;
  StorageReads reads_;
  PassExperts last_;
};

// Guesses the target's token with probability 0.9 for the first `until` positions, 0.1 after
// (the acceptance of a drafter that gets worse as the context grows); with `confident`, reports
// that probability as its confidence.
class FadingDrafter final : public Drafter {
 public:
  FadingDrafter(int64_t until, bool confident) : until_(until), confident_(confident) {}
  std::string name() const override { return "fading"; }
  Draft propose(std::span<const int32_t> context, int k) override {
    Draft d;
    for (int i = 0; i < k; ++i) {
      const int64_t q = static_cast<int64_t>(context.size()) + i;  // the position of guess i
      const double p = q < until_ ? 0.9 : 0.1;
      d.tokens.push_back(coin_(rng_) < p ? token_at(q) : (token_at(q) + 1) % kVocab);
      if (confident_) d.confidence.push_back(p);
    }
    return d;
  }

 private:
  int64_t until_;
  bool confident_;
  std::mt19937_64 rng_{3};
  std::uniform_real_distribution<double> coin_{0.0, 1.0};
};

}  // namespace

TEST_CASE("the loop turns itself off when acceptance falls from 0.9 to 0.1, and probes ever less often", "[spec-cost][speculative]") {
  for (bool confident : {false, true}) {
    INFO((confident ? "with" : "without") << " a confidence head");
    TimedSession target;
    FadingDrafter drafter(150, confident);
    Sampler sampler(SamplerOptions{});
    SpeculativeDecoder decoder(target, &drafter, sampler, kVocab, {4, true});
    std::vector<int32_t> context = {token_at(0)};
    SpeculativeStats at_drop;
    while (context.size() < 550) {
      for (int32_t t : decoder.step(context)) context.push_back(t);
      if (context.size() <= 150) at_drop = decoder.stats();
    }
    for (size_t q = 0; q < context.size(); ++q) REQUIRE(context[q] == token_at(static_cast<int64_t>(q)));  // the target's tokens
    const SpeculativeStats& s = decoder.stats();
    INFO("at the drop: " << at_drop.verify_passes << " verify passes, " << at_drop.committed << " committed in "
                         << at_drop.steps << " steps; at the end: " << s.verify_passes << " verify passes, "
                         << s.probes << " probes, " << s.steps << " steps");
    CHECK_FALSE(at_drop.off);
    CHECK(at_drop.committed > 1.5 * at_drop.steps);  // speculation paid while guesses held
    CHECK(s.off);
    // Off within about a window of guesses (26 verify passes on a quiet machine; the passes are
    // timed by sleeps, so a loaded machine's noise is allowed for: two windows).
    CHECK(s.verify_passes - at_drop.verify_passes < 64);
    CHECK(s.probes >= 2);
    CHECK(s.probes <= 5);  // 32, 64, 128, 256 plain steps apart: not every 32
  }
}
