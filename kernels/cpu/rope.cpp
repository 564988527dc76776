// rope_interleaved (see rope.hpp).
#include "cpu/rope.hpp"

#include <cmath>

namespace deltafin::cpu {

void rope_interleaved(float* x, const float* inv_freq, int64_t half, float attention_factor, int64_t pos) {
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = p * inv_freq[i];
    const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
    const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = b * c + a * s;
  }
}

void rope_interleaved_ref(float* x, const float* inv_freq, int64_t half, float attention_factor, int64_t pos) {
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(static_cast<float>(pos) * inv_freq[i]);
    const double c = std::cos(angle) * attention_factor, s = std::sin(angle) * attention_factor;
    const double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = static_cast<float>(a * c - b * s);
    x[2 * i + 1] = static_cast<float>(b * c + a * s);
  }
}

}  // namespace deltafin::cpu
