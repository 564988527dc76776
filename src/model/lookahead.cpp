// Lookahead (see lookahead.hpp).
#include "model/lookahead.hpp"

#include <set>
#include <vector>

namespace deltafin {

void Lookahead::begin_pass(const ExpertStore& store) {
  ++passes_;
  if (cap_ == 0) return;
  const ExpertStoreStats s = store.stats();
  if (passes_ == off_until_) {  // probing again: a fresh window
    window_reads_ = s.prefetch_reads;
    window_used_ = s.prefetch_used;
    return;
  }
  const uint64_t reads = s.prefetch_reads - window_reads_, used = s.prefetch_used - window_used_;
  if (reads < kWindowReads) return;
  if (static_cast<double>(used) < kMinHitRate * static_cast<double>(reads)) {
    off_until_ = passes_ + kOffPasses;
    ++switched_off_;
  }
  window_reads_ = s.prefetch_reads;
  window_used_ = s.prefetch_used;
}

void Lookahead::guess(ExpertStore& store, int64_t next_layer, const std::vector<int32_t>& chosen) {
  if (!active()) return;
  const std::set<int32_t> wanted(chosen.begin(), chosen.end());
  const std::vector<int32_t> ids(wanted.begin(), wanted.end());
  store.prefetch(next_layer, ids, cap_);
}

}  // namespace deltafin
