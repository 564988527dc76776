// Router lookahead: while layer L runs, layer L+1's router applied to layer L's MoE input guesses
// which experts L+1 will need, and their reads start at once, most confident first (the summed
// routing weight over the pass's positions; ExpertStore::prefetch: byte-capped, low priority,
// taking room only from experts needed later than layer L+1). When L+1 routes for real, the
// guesses it did not choose whose reads have not started are cancelled. Guesses never change
// results. Lookahead turns itself off when fewer than kMinHitRate of its recent guesses that
// were read (not cancelled) were used, and probes again after kOffPasses passes. Off by default
// (--lookahead): when the drives are the bottleneck every wasted guess costs a read (measured in
// k3-public-bench/results/streaming.md).
#pragma once

#include <cstdint>
#include <vector>

#include "io/expert_store.hpp"

namespace deltafin {

class Lookahead {
 public:
  static constexpr double kMinHitRate = 0.5;  // below: more than half the guessed bytes are wasted
  static constexpr uint64_t kWindowReads = 64;   // judge the hit rate over this many guesses
  static constexpr uint64_t kOffPasses = 32;

  // byte_cap: prefetched bytes in flight at most; 0 disables lookahead.
  explicit Lookahead(uint64_t byte_cap = 0) : cap_(byte_cap) {}

  // Updates the on/off state from the store's prefetch counters; call once per pass.
  void begin_pass(const ExpertStore& store);
  bool active() const { return cap_ > 0 && passes_ >= off_until_; }
  // chosen, weights [n, k]: the experts layer `next_layer`'s router picks on the current MoE
  // input, and their routing weights.
  void guess(ExpertStore& store, int64_t next_layer, const std::vector<int32_t>& chosen, const std::vector<float>& weights);

 private:
  uint64_t cap_;
  uint64_t passes_ = 0;
  uint64_t off_until_ = 0;
  uint64_t window_reads_ = 0, window_used_ = 0;  // store counters when the window started
  uint64_t switched_off_ = 0;
};

}  // namespace deltafin
