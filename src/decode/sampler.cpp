// Sampler (see sampler.hpp).
#include "decode/sampler.hpp"

#include <algorithm>
#include <cmath>

namespace deltafin {

int32_t Sampler::sample(const std::vector<float>& logits) {
  const auto best = std::max_element(logits.begin(), logits.end());
  if (temperature_ <= 0.0f) return static_cast<int32_t>(best - logits.begin());
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - *best) / temperature_);
  double r = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  for (size_t i = 0; i < p.size(); ++i)
    if ((r -= p[i]) < 0) return static_cast<int32_t>(i);
  return static_cast<int32_t>(best - logits.begin());
}

}  // namespace deltafin
