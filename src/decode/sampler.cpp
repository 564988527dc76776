// Sampler (see sampler.hpp).
#include "decode/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.hpp"

namespace deltafin {

Sampler::Sampler(const SamplerOptions& o) : options_(o), rng_(o.seed) {
  if (!(o.temperature >= 0.0f && std::isfinite(o.temperature))) fail("--temp: must be a finite number >= 0 (got {})", o.temperature);
  if (o.top_k < 0) fail("--top-k: must be >= 0 (got {})", o.top_k);
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) fail("--top-p: must be in (0, 1] (got {})", o.top_p);
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) fail("--min-p: must be in [0, 1] (got {})", o.min_p);
}

std::vector<double> Sampler::distribution(const std::vector<float>& logits) const {
  const size_t n = logits.size();
  std::vector<int32_t> order(n);  // ids by descending logit, lower id first on ties
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = n;
  if (options_.top_k > 0) keep = std::min<size_t>(keep, options_.top_k);
  std::vector<double> p(n, 0.0);
  const double top = logits[order[0]];
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += p[order[i]] = std::exp((logits[order[i]] - top) / options_.temperature);
  if (options_.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t i = 0;
    while (i < keep && cumulative < options_.top_p * sum) cumulative += p[order[i++]];
    keep = std::max<size_t>(i, 1);
  }
  if (options_.min_p > 0.0f) {
    const double floor = options_.min_p * p[order[0]];
    size_t i = 1;
    while (i < keep && p[order[i]] >= floor) ++i;
    keep = i;
  }
  sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (i >= keep) p[order[i]] = 0.0;
    else sum += p[order[i]];
  }
  for (double& v : p) v /= sum;
  return p;
}

int32_t Sampler::sample(const std::vector<float>& logits) {
  if (greedy()) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  return draw(distribution(logits));
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::draw(const std::vector<double>& p) {
  double r = uniform();
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0.0) continue;
    last = static_cast<int32_t>(i);
    if ((r -= p[i]) < 0) return last;
  }
  return last;
}

}  // namespace deltafin
