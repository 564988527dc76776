// Rotary position embedding with YaRN frequencies, applied to the checkpoint's interleaved
// layout: pair i is (x[2i], x[2i+1]) rotated by pos * inv_freq[i]. Angles are computed in fp32
// as transformers does; YaRN's mscale is in the softmax scale, cos/sin carry attention_factor.
#pragma once

#include <cstdint>
#include <vector>

#include "weights/model_config.hpp"

namespace deltafin {

class Rope {
 public:
  explicit Rope(const ModelConfig& config);

  // [dim / 2] the frequencies the backend's rope op turns pair i by; cos/sin carry attention_factor.
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float attention_factor() const { return attention_factor_; }

 private:
  int64_t dim_;
  float attention_factor_;
  std::vector<float> inv_freq_;  // [dim / 2]
};

}  // namespace deltafin
