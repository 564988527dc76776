// Lookahead (see lookahead.hpp).
#include "model/lookahead.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace deltafin {

void Lookahead::begin_pass(const ExpertStore& store) {
  ++passes_;
  if (cap_ == 0) return;
  const ExpertStoreStats s = store.stats();
  if (passes_ == off_until_) {  // probing again: a fresh window
    window_reads_ = s.prefetch_reads - s.prefetch_cancelled;
    window_used_ = s.prefetch_used;
    return;
  }
  const uint64_t reads = s.prefetch_reads - s.prefetch_cancelled - window_reads_, used = s.prefetch_used - window_used_;
  if (reads < kWindowReads) return;
  if (static_cast<double>(used) < kMinHitRate * static_cast<double>(reads)) {
    off_until_ = passes_ + kOffPasses;
    ++switched_off_;
  }
  window_reads_ = s.prefetch_reads - s.prefetch_cancelled;
  window_used_ = s.prefetch_used;
}

void Lookahead::guess(ExpertStore& store, int64_t next_layer, const std::vector<int32_t>& chosen,
                      const std::vector<float>& weights) {
  if (!active()) return;
  std::map<int32_t, double> confidence;  // expert -> summed routing weight
  for (size_t i = 0; i < chosen.size(); ++i) confidence[chosen[i]] += weights[i];
  std::vector<std::pair<double, int32_t>> ranked;
  for (const auto& [expert, w] : confidence) ranked.push_back({-w, expert});
  std::sort(ranked.begin(), ranked.end());  // most confident first, ties by id
  std::vector<int32_t> ids;
  for (const auto& [w, expert] : ranked) ids.push_back(expert);
  store.prefetch(next_layer, ids, cap_);
}

}  // namespace deltafin
