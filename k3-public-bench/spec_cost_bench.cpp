// The verify loop's cost model against fixed k (issue 39 item 4): on a storage-bound model with a
// streamed spine (MEMORY_GB small), a scripted drafter of controlled acceptance, fixed k in
// {1, 2, 4, 8} and the adaptive loop (max k 8) without a confidence head, with a calibrated
// one (the true acceptance probability of each guess) and with a mis-calibrated one (its square
// root: overconfident, compressed). The drafter proposes the target's own greedy continuation
// (found by a plain run first); guess q holds with probability p_q = accept + 0.25 u_q (u_q in
// [-1, 1], clamped to [0.02, 0.98]) and is otherwise a wrong token, both fixed per position, so
// every arm sees the same drafts. Every arm opens a fresh engine (cold expert cache) and must
// generate the plain run's ids. One run of every arm, interleaved order by RUN; prints one JSON
// object per arm (k3-public-bench/run-spec-cost-bench.sh takes medians over runs).
// Usage: spec_cost_bench MODEL PLACEMENT CACHE_GB TOKENS MEMORY_GB RUN
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "spec_generation.hpp"

using namespace deltafin;

namespace {

double unit(uint64_t x) {  // splitmix64 -> [0, 1)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<double>((x ^ (x >> 31)) >> 11) / 9007199254740992.0;
}

enum class Confidence { None, True, Sqrt };

class ScriptedDrafter final : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> script, size_t prompt, double accept, Confidence c)
      : script_(std::move(script)), prompt_(prompt), accept_(accept), confidence_(c) {}
  std::string name() const override { return "scripted"; }
  Draft propose(std::span<const int32_t> context, int k) override {
    Draft d;
    for (size_t i = context.size() - prompt_; i < script_.size() && static_cast<int>(d.tokens.size()) < k; ++i) {
      const double p = std::clamp(accept_ + 0.25 * (2 * unit(2 * i) - 1), 0.02, 0.98);
      d.tokens.push_back(unit(2 * i + 1) < p ? script_[i] : (script_[i] + 1) % 1000);
      if (confidence_ == Confidence::True) d.confidence.push_back(p);
      if (confidence_ == Confidence::Sqrt) d.confidence.push_back(std::sqrt(p));
    }
    return d;
  }

 private:
  std::vector<int32_t> script_;  // the greedy continuation, the first token included
  size_t prompt_;
  double accept_;
  Confidence confidence_;
};


struct Arm {
  double accept;
  int k;
  bool adaptive;
  Confidence confidence;
};

const char* confidence_name(Confidence c) { return c == Confidence::None ? "none" : c == Confidence::True ? "true" : "sqrt"; }

}  // namespace

int run(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: spec_cost_bench MODEL PLACEMENT CACHE_GB TOKENS MEMORY_GB RUN\n");
    return 2;
  }
  EngineOptions o;
  o.model_dir = argv[1];
  o.placement = argv[2];
  o.cache_gb = std::atof(argv[3]);
  const int tokens = std::atoi(argv[4]);
  o.memory_gb = std::atof(argv[5]);
  const int run_index = std::atoi(argv[6]);
  std::vector<int32_t> prompt;
  for (int i = 1; i <= 4; ++i) prompt.push_back(i);  // a short prefill: the decode is measured

  std::vector<Arm> arms;
  for (double accept : {0.3, 0.6, 0.9}) {
    for (int k : {1, 2, 4, 8}) arms.push_back({accept, k, false, Confidence::None});
    for (Confidence c : {Confidence::None, Confidence::True, Confidence::Sqrt}) arms.push_back({accept, 8, true, c});
  }
  std::rotate(arms.begin(), arms.begin() + static_cast<std::ptrdiff_t>(run_index % arms.size()), arms.end());
  // The plain run (k = 0) first: its ids are the script and the reference.
  const bench::SpecRun plain = bench::timed_generation(o, prompt, tokens, nullptr, {0, false});
  const std::vector<int32_t> script(plain.ids.begin(), plain.ids.end());
  arms.insert(arms.begin(), {0, 0, false, Confidence::None});
  for (const Arm& a : arms) {
    ScriptedDrafter drafter(script, prompt.size(), a.accept, a.confidence);
    const bench::SpecRun r = a.k == 0 ? plain : bench::timed_generation(o, prompt, tokens, &drafter, {a.k, a.adaptive});
    const double committed = static_cast<double>(r.spec.committed);
    std::printf("{\"run\": %d, \"accept\": %.2f, \"k\": %d, \"adaptive\": %s, \"confidence\": \"%s\", \"tok_s\": %.4f, "
                "\"steps\": %llu, \"verify_passes\": %llu, \"drafted\": %llu, \"accepted\": %llu, \"committed\": %llu, "
                "\"confidence_cuts\": %llu, \"spine_bytes_per_token\": %.0f, \"expert_bytes_per_token\": %.0f, "
                "\"same_ids\": %s}\n",
                run_index, a.accept, a.k, a.adaptive ? "true" : "false", confidence_name(a.confidence), committed / r.seconds,
                static_cast<unsigned long long>(r.spec.steps), static_cast<unsigned long long>(r.spec.verify_passes),
                static_cast<unsigned long long>(r.spec.drafted), static_cast<unsigned long long>(r.spec.accepted),
                static_cast<unsigned long long>(r.spec.committed), static_cast<unsigned long long>(r.spec.confidence_cuts),
                static_cast<double>(r.after.spine_bytes_read - r.before.spine_bytes_read) / committed,
                static_cast<double>(r.after.expert_bytes_read - r.before.expert_bytes_read) / committed,
                r.ids == plain.ids ? "true" : "false");
    std::fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spec_cost_bench: %s\n", e.what());
    return 1;
  }
}
