// What a verify pass costs and what its guesses bring: the pieces of the speculative loop's choice
// of k (decode/speculative.hpp), as plain functions of measured inputs so tests can feed them.
//   ExpertUnionWindow: the routed (layer, expert) pairs of recent one-position passes at consecutive
//     positions; the expected union of n consecutive positions is the mean union size over the
//     windows of n consecutive positions it holds (a width with no such window extends the last
//     measured increment, which overestimates: consecutive positions share more as n grows).
//   pass_seconds: t(n) of a pass over n positions, measured when a pass of that width was, else
//     t(1) + (read(n) - read(1)) * seconds_per_byte + (n - 1) * position_seconds, where read(n) =
//     spine bytes (once a pass, whatever n) + expected union pairs(n) * read bytes per pair.
//   expected_committed: tokens a pass commits with k guesses, 1 + sum_{j<=k} prod_{i<=j} c_i, where
//     c_i is the probability that guess i holds given 1..i-1 did.
//   expected_replayed: the positions a rejection leaves to replay (K3), priced as extra positions.
//   best_width: the k that maximises committed tokens per second of pass, drafting and replay.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace deltafin {

class ExpertUnionWindow {
 public:
  static constexpr size_t kPositions = 64;  // positions whose window unions are remembered
  explicit ExpertUnionWindow(int max_width) : max_width_(static_cast<size_t>(max_width)) {}
  // A one-position pass at `position` requested `pairs` (ascending, distinct). A position that
  // does not follow the previous one starts new windows (its earlier unions are kept).
  void add(int64_t position, std::vector<uint64_t> pairs);
  // The expected number of distinct pairs over n >= 1 consecutive positions; 0 before any.
  double expected_pairs(int n) const;

 private:
  size_t max_width_;
  std::deque<std::pair<int64_t, std::vector<uint64_t>>> recent_;  // the last max_width_ consecutive positions
  std::deque<std::vector<uint32_t>> unions_;  // per position p: [n - 1] = union size of p - n + 1 .. p
};

// The measured inputs of the price of a pass (SpeculativeDecoder fills them).
struct PassPrices {
  double plain_seconds = 0;          // t(1), measured
  std::vector<double> measured;      // [n]: measured t(n) of passes of n positions, 0: none yet
  std::vector<double> read_bytes;    // [n]: expected bytes a pass of n positions reads, n >= 1
  double seconds_per_byte = 0;       // 1 / the rate plain passes read at
  double position_seconds = 0;       // compute of one more position in a pass
};

double pass_seconds(const PassPrices& p, int n);

// accept[i]: the probability that guess i + 1 holds given the earlier ones did; [k] of the result
// for k = 0..accept.size().
std::vector<double> expected_committed(std::span<const double> accept);

struct WidthChoice {
  int k = 0;
  double rate = 0;  // committed tokens per second
};
// accept as above: [k] = the positions a rejection among k guesses leaves to replay, expected:
// sum over a < k of P(a guesses hold, then one fails) x (a + 1) (a session with a recurrent state,
// K3, restores its snapshot from before the pass and replays the pending token and the a
// accepted ones, in the next pass).
std::vector<double> expected_replayed(std::span<const double> accept);

// Over k = 0..committed.size() - 1: committed[k] / (t(k + 1) + extra_seconds[k]) (k = 0: a plain
// pass, extra_seconds[0] ignored; extra: drafting and replay). A width whose t was never measured is taken only when it is
// predicted at least `explore_gain` times as fast as a plain pass; else the best measured one.
WidthChoice best_width(const PassPrices& p, std::span<const double> committed, std::span<const double> extra_seconds,
                       double explore_gain);

// Confidences scaled so that over the window (predicted, accepted) their mean matches the observed
// acceptance (one pseudo-guess predicted 1 and accepted keeps the scale finite), clamped to [0, 1].
std::vector<double> calibrated(std::span<const double> confidence, const std::deque<std::pair<double, bool>>& window);

}  // namespace deltafin
