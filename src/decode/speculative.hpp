// Speculative decoding in which the target checks every token. One step:
//   1. choose k (adaptive: the k that commits the most tokens per second, 0 = a plain step, during
//      which the drafter may still guess "in the shadow": its guess is compared with the committed
//      token, which measures acceptance without spending target reads on it);
//   2. the drafter guesses d1..dk after the committed context; a drafter with a confidence head
//      (Draft::confidence) is asked for max_k and its calibrated confidences choose how many of
//      them to verify (possibly none: the first becomes a shadow guess);
//   3. the target scores [pending, d1..dk] in one pass (k+1 positions, each expert of their union
//      read and run once; kernels are batch-invariant, so every row equals a one-position pass);
//   4. verify_drafts: greedy keeps the longest prefix the target's argmax agrees with, plus the
//      target's own next token; with temperature > 0 the Leviathan/Chen rule (accept d with
//      probability min(1, p(d)/q(d)), else draw from normalize(max(0, p - q)) and stop), which
//      keeps the target's distribution exactly;
//   5. the session rewinds to the last accepted position (KV truncated, recurrent state restored
//      and the accepted positions replayed within the next pass; experts only the rejected
//      positions used go to the cold end of the cache).
// The cost model (decode/verify_cost.hpp prices a pass, measured inputs only):
//   t(n) = measured t(n) once a verify pass of n positions ran (moving average), else
//          t(1) + (read(n) - read(1)) / B + (n - 1) * C, where t(1) is the measured plain pass
//          (fixed cost, the streamed spine read once a pass whatever n, its experts, one position),
//          read(n) = spine bytes a pass + U(n) * R: U(n) the expected union of (layer, expert)
//          pairs of n consecutive positions (the mean over sliding windows of the last plain
//          positions' pairs, Session::last_pass_experts; a verify pass of width n measured
//          replaces it), R the bytes a requested pair costs to read (record bytes x the miss rate,
//          measured on recent passes as bytes read / pairs), B the rate plain passes read at
//          (bytes / t(1): the pass taken as bound by its reads, which overprices extra bytes
//          where it is not), C per-position compute (what measured widths leave unexplained,
//          0 before any; t(1) / 3 where passes read nothing);
//   E(k) = 1 + sum_{j<=k} prod_{i<=j} c_i committed tokens, c_i the calibrated confidence of
//          guess i (scaled so that the window's predictions match its observed acceptance) where
//          the drafter has one, else the windowed acceptance alpha for every i;
//   k maximises E(k) / (t(k+1) + draft time + replay), draft time measured per token (per call
//          for a drafter with confidence, which drafts its block in one call), replay: where the
//          session was seen to replay (K3 restores its state from before the pass and runs the
//          pending and accepted positions again in the next pass), the expected positions a
//          rejection leaves (verify_cost.hpp) x what one more position adds to a pass; passes are
//          timed by the positions they ran (a replay's included) together with their rewind
//          (where a longer replay runs at once); a width never measured
//          is tried only when predicted kExploreGain x faster than plain. When k = 0 wins the loop
//          turns off (plain steps, a probe with a shadow guess every 32 steps, doubling up to 512
//          while it still does not pay); acceptance is counted over the last kWindow guesses the
//          target judged (guesses after a rejection are not), so it follows a drafter that gets
//          worse as the context grows and the loop turns off within about a window.
// Greedy output is byte-identical to plain greedy decoding (tests/test_speculative.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/verify_cost.hpp"

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
  uint64_t confidence_cuts = 0;  // drafts the confidence head cut short (to 0: a shadow guess)
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
  static constexpr size_t kMinOutcomes = 3;    // guesses seen before speculating at all (none with a confidence head)
  static constexpr double kExploreGain = 1.1;  // a width never measured is tried when predicted this much faster than plain

  // drafter nullptr: plain decoding (one position per pass).
  SpeculativeDecoder(Session& target, Drafter* drafter, Sampler& sampler, int64_t vocab, const SpeculativeOptions& o);
  // context: the committed tokens; the last is pending (sampled, not yet scored: the session holds
  // all but it). Returns the tokens this step commits; the session then holds all but the last.
  std::vector<int32_t> step(std::span<const int32_t> context);
  const SpeculativeStats& stats() const { return stats_; }

  // The prices of passes as measured so far (tests read them; verify_cost.hpp).
  PassPrices prices() const;

 private:
  int choose_k();
  // A draft with confidences cut to the k its calibrated confidences pay for (0: a plain step,
  // its first guess then returned as a shadow guess).
  int32_t cut_by_confidence(Draft& draft);
  void learn(int positions, double seconds, int drafted, int accepted, const std::vector<double>& confidence,
             StorageReads read, const PassExperts& experts, int64_t start);
  void learn_draft(size_t guesses, double seconds);
  // [k]: the expected replay a rejection among k guesses adds to the next pass (0 where the
  // session never replayed), priced as extra positions.
  std::vector<double> replay_seconds(const PassPrices& p, std::span<const double> accept) const;
  double expected_pairs(int positions) const;  // U(n)
  double acceptance() const;  // per guess, (accepted + 1) / (guesses + 2) over the window
  void observe(bool accepted, const std::vector<double>& confidence, size_t i);

  Session& target_;
  Drafter* drafter_;
  Sampler& sampler_;
  int64_t vocab_;
  SpeculativeOptions options_;
  SpeculativeStats stats_;
  std::deque<bool> outcomes_;         // the last kWindow judged guesses: accepted or not
  std::deque<std::pair<double, bool>> confident_;  // the last kWindow judged guesses with a confidence
  bool has_confidence_ = false;       // the drafter reports confidences
  std::vector<double> pass_seconds_;  // [positions run]: moving average, 0 = not measured
  std::vector<double> pass_pairs_;    // [positions run]: union pairs of measured passes, moving average
  ExpertUnionWindow window_;          // plain passes' pairs
  bool pairs_known_ = false;          // the session reports its passes' experts
  bool replays_ = false;              // a pass ran more positions than it was given (K3's replay)
  double read_per_pair_ = -1;         // expert bytes read per requested pair (-1: none yet)
  double draft_token_seconds_ = 0, draft_call_seconds_ = 0;
  double plain_spine_bytes_ = 0;      // read by a plain pass: moving average
  bool off_ = false;
  uint64_t since_probe_ = 0;
  uint64_t probe_every_ = kFirstProbe;
  uint64_t since_plain_ = 0;
  bool shadow_ = false;       // this step: a plain step with a shadow guess
};

}  // namespace deltafin
