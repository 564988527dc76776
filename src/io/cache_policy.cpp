// CachePolicy (see cache_policy.hpp).
#include "io/cache_policy.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

namespace deltafin {

CachePolicy::CachePolicy(int64_t layers, int64_t experts, CachePolicyOptions options)
    : layers_(layers), experts_(experts), options_(std::move(options)) {
  if (options_.kind == CachePolicyOptions::Kind::Frequency) {
    counts_.assign(static_cast<size_t>(layers_ * experts_), 0.0);
    growth_ = std::exp2(1.0 / options_.half_life);
  }
  if (options_.kind == CachePolicyOptions::Kind::Pinned) {
    pinned_.assign(static_cast<size_t>(layers_ * experts_), 0);
    std::vector<std::pair<uint64_t, int64_t>> ranked;  // (count, index)
    for (int64_t l = 0; l < std::min<int64_t>(layers_, static_cast<int64_t>(options_.usage.size())); ++l)
      for (int64_t e = 0; e < std::min<int64_t>(experts_, static_cast<int64_t>(options_.usage[l].size())); ++e)
        if (options_.usage[l][e] > 0) ranked.push_back({options_.usage[l][e], l * experts_ + e});
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    for (size_t i = 0; i < std::min<size_t>(ranked.size(), options_.pinned); ++i) pinned_[ranked[i].second] = 1;
  }
}

void CachePolicy::begin_pass() {
  if (options_.kind != CachePolicyOptions::Kind::Frequency) return;
  weight_ *= growth_;
  passes_ += weight_;
  if (weight_ > 1e200) {  // rescale: every count and the pass total by the same factor
    for (double& c : counts_) c /= weight_;
    passes_ /= weight_;
    weight_ = 1;
  }
}

void CachePolicy::requested(CacheMeta& meta) {
  meta.last_use = ++tick_;
  meta.cold = false;
  if (options_.kind == CachePolicyOptions::Kind::Frequency) counts_[meta.layer * experts_ + meta.expert] += weight_;
}

uint64_t CachePolicy::next_use(const CacheMeta& meta) const {
  if (meta.cold) return static_cast<uint64_t>(layers_) + 1;
  return static_cast<uint64_t>((meta.layer - current_layer_ - 1 + 2 * layers_) % layers_ + 1);  // next layer: 1, this one: L
}

double CachePolicy::score(const CacheMeta& meta) const {
  const double distance = static_cast<double>(next_use(meta));
  switch (options_.kind) {
    case CachePolicyOptions::Kind::Frequency: {
      if (meta.cold) return 1e300;
      const double p = std::max(counts_[meta.layer * experts_ + meta.expert], 1e-300) / std::max(passes_, 1e-300);
      return distance + static_cast<double>(layers_) * (1 / std::min(p, 1.0) - 1);
    }
    case CachePolicyOptions::Kind::Pinned:
      return pinned_[meta.layer * experts_ + meta.expert] && !meta.cold ? distance - 4.0 * static_cast<double>(layers_) : distance;
    case CachePolicyOptions::Kind::CycleLru:
      break;
  }
  return distance;
}

bool CachePolicy::evict_before(const CacheMeta& a, const CacheMeta& b) const {
  const double sa = score(a), sb = score(b);
  if (sa != sb) return sa > sb;
  return std::tie(a.last_use, a.layer, a.expert) < std::tie(b.last_use, b.layer, b.expert);
}

}  // namespace deltafin
