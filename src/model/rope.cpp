// YaRN inverse frequencies (transformers' _compute_yarn_parameters); the rotation is the backend's rope op.
#include "model/rope.hpp"

#include <algorithm>
#include <cmath>

namespace deltafin {
namespace {

// Dimension index at which `rotations` full turns fit in the original context.
double correction_dim(double rotations, double dim, double base, double original_max) {
  return dim * std::log(original_max / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

Rope::Rope(const ModelConfig& config)
    : dim_(config.qk_rope_head_dim), attention_factor_(config.rope_attention_factor()), inv_freq_(dim_ / 2) {
  const float base = config.rope.theta;
  const int64_t half = dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim_);
    inv_freq_[i] = 1.0f / std::pow(base, exponent);
  }
  if (!config.rope.yarn) return;
  const RopeConfig& r = config.rope;
  double low = std::floor(correction_dim(r.beta_fast, dim_, base, r.original_max_position_embeddings));
  double high = std::ceil(correction_dim(r.beta_slow, dim_, base, r.original_max_position_embeddings));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim_ - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    // extrapolation weight: 1 keeps theta_i, 0 uses theta_i / factor
    const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim_));
    const float interp = 1.0f / (r.factor * pos_freq);
    const float extra = 1.0f / pos_freq;
    inv_freq_[i] = interp * (1.0f - extrapolation) + extra * extrapolation;
  }
}

}  // namespace deltafin
