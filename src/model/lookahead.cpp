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

void Lookahead::guess(ExpertStore& store, int64_t next_layer, const RouterSpec& router, const float* next_logits,
                      const float* bias, int64_t n) {
  if (!active()) return;
  std::vector<int32_t> chosen(router.top_k);
  std::vector<float> weight(router.top_k);
  std::set<int32_t> wanted;
  for (int64_t t = 0; t < n; ++t) {
    route_token(router, next_logits + t * router.experts, bias, chosen.data(), weight.data());
    wanted.insert(chosen.begin(), chosen.end());
  }
  const std::vector<int32_t> ids(wanted.begin(), wanted.end());
  store.prefetch(next_layer, ids, cap_);
}

}  // namespace deltafin
