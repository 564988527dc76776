// Speculative decoding in which the target checks every token. One step:
//   1. choose k (adaptive: from measured acceptance and pass costs, a width not yet measured priced
//      from what a plain pass reads: the streamed spine once a pass, experts per position; 0 = a plain step, during which
//      the drafter may still guess "in the shadow": its guess is compared with the committed token,
//      which measures acceptance without spending target reads on it);
//   2. the drafter guesses d1..dk after the committed context;
//   3. the target scores [pending, d1..dk] in one pass (k+1 positions, each expert of their union
//      read and run once; kernels are batch-invariant, so every row equals a one-position pass);
//   4. verify_drafts: greedy keeps the longest prefix the target's argmax agrees with, plus the
//      target's own next token; with temperature > 0 the Leviathan/Chen rule (accept d with
//      probability min(1, p(d)/q(d)), else draw from normalize(max(0, p - q)) and stop), which
//      keeps the target's distribution exactly;
//   5. the session rewinds to the last accepted position (KV truncated, recurrent state restored
//      and the accepted positions replayed within the next pass; experts only the rejected
//      positions used go to the cold end of the cache).
// Greedy output is byte-identical to plain greedy decoding (tests/test_speculative.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"

namespace deltafin {

struct SpeculativeOptions {
  int max_k = 4;         // --draft-k
  bool adaptive = true;  // choose k per step; off (k = 0) while it does not pay, probing again later
};

struct SpeculativeStats {
  uint64_t steps = 0;          // target passes
  uint64_t verify_passes = 0;  // passes that checked at least one guess
  uint64_t drafted = 0, accepted = 0;
  uint64_t committed = 0;      // tokens committed by steps
  uint64_t probes = 0;         // re-evaluations while speculation was off
  uint64_t shadow_guesses = 0; // guesses checked against the committed token instead of verified
  uint64_t shadow_accepted = 0;  // of those, equal to the committed token
  bool off = false;            // speculation is off now: the cost model found that guesses do not pay
  double draft_seconds = 0, target_seconds = 0;
};

// Accepts or rejects the guesses against the target's logits [k+1, vocab] (row i scored after
// the pending token and d1..di). Returns the committed tokens (1..k+1).
std::vector<int32_t> verify_drafts(const Draft& draft, std::span<const float> logits, int64_t vocab, Sampler& sampler);

class SpeculativeDecoder {
 public:
  static constexpr uint64_t kFirstProbe = 32, kLastProbe = 512;  // plain steps between probes while off (doubling)
  static constexpr size_t kWindow = 32;                             // guesses the acceptance estimate remembers
  static constexpr uint64_t kPlainEvery = 16;  // while speculating, one plain step this often keeps its cost current
  static constexpr size_t kMinOutcomes = 3;    // guesses seen before speculating at all
  static constexpr double kExploreGain = 1.1;  // a width never measured is tried when predicted this much faster than plain

  // drafter nullptr: plain decoding (one position per pass).
  SpeculativeDecoder(Session& target, Drafter* drafter, Sampler& sampler, int64_t vocab, const SpeculativeOptions& o);
  // context: the committed tokens; the last is pending (sampled, not yet scored: the session holds
  // all but it). Returns the tokens this step commits; the session then holds all but the last.
  std::vector<int32_t> step(std::span<const int32_t> context);
  const SpeculativeStats& stats() const { return stats_; }

 private:
  int choose_k();
  double pass_seconds(int positions) const;  // linear model fitted to the measured passes
  void learn(int positions, double seconds, int drafted, int accepted, double draft_seconds, StorageReads read);

  Session& target_;
  Drafter* drafter_;
  Sampler& sampler_;
  int64_t vocab_;
  SpeculativeOptions options_;
  SpeculativeStats stats_;
  std::deque<bool> outcomes_;         // the last kWindow guesses: accepted or not
  std::vector<double> pass_seconds_;  // [positions]: moving average, 0 = not measured
  double draft_token_seconds_ = 0;
  double plain_spine_bytes_ = 0, plain_expert_bytes_ = 0;  // read by a plain pass: moving averages
  bool off_ = false;
  uint64_t since_probe_ = 0;
  uint64_t probe_every_ = kFirstProbe;
  uint64_t since_plain_ = 0;
  double acceptance() const;  // per guess, (accepted + 1) / (guesses + 2) over the window
  void observe(bool accepted);
  bool shadow_ = false;       // this step: a plain step with a shadow guess
};

}  // namespace deltafin
