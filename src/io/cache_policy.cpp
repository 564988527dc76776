// CachePolicy (see cache_policy.hpp).
#include "io/cache_policy.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace deltafin {

CachePolicy::CachePolicy(int64_t layers, int64_t experts, CachePolicyOptions options)
    : layers_(layers), experts_(experts), options_(std::move(options)),
      counts_(static_cast<size_t>(layers * experts), 0.0), growth_(std::exp2(1.0 / options_.half_life)) {}

void CachePolicy::begin_pass() {
  weight_ *= growth_;
  passes_ += weight_;
  if (weight_ > 1e200) {  // rescale every count and the pass total by the same factor
    for (double& c : counts_) c /= weight_;
    passes_ /= weight_;
    weight_ = 1;
  }
}

void CachePolicy::requested(CacheMeta& meta) {
  meta.last_use = ++tick_;
  meta.cold = false;
  counts_[static_cast<size_t>(meta.layer * experts_ + meta.expert)] += weight_;
}

uint64_t CachePolicy::next_use(const CacheMeta& meta) const {
  if (meta.cold) return static_cast<uint64_t>(layers_) + 1;
  return static_cast<uint64_t>((meta.layer - current_layer_ - 1 + 2 * layers_) % layers_ + 1);  // next layer: 1, this one: L
}

double CachePolicy::expected_return(const CacheMeta& meta) const {
  if (meta.cold) return HUGE_VAL;
  if (!options_.next_request.empty())
    return meta.last_use < options_.next_request.size() ? static_cast<double>(options_.next_request[meta.last_use]) : HUGE_VAL;
  const double count = counts_[static_cast<size_t>(meta.layer * experts_ + meta.expert)];
  const double p = std::min(1.0, count / std::max(passes_, 1e-300));
  return static_cast<double>(next_use(meta)) + static_cast<double>(layers_) * (1 / std::max(p, 1e-300) - 1);
}

bool CachePolicy::goes_before(double ra, const CacheMeta& a, double rb, const CacheMeta& b) {
  if (ra != rb) return ra > rb;
  return std::tie(a.last_use, a.layer, a.expert) < std::tie(b.last_use, b.layer, b.expert);
}

}  // namespace deltafin
