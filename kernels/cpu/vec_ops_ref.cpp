// Reference twins of the vector operations: the textbook formulas as plain scalar loops in index
// order. They define what the fast kernels compute and are only used by tests.
#include <cmath>

#include "cpu/vec_ops.hpp"

namespace deltafin::cpu {

void rmsnorm_ref(const float* x, const float* weight, int64_t n, float eps, float* out) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * inv) * weight[i];
}

void silu_mul_ref(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

float dot_ref(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_ref(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void softmax_ref(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - max) / sum;
}

}  // namespace deltafin::cpu
