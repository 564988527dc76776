// Small vector operations of the forward pass, each with a plain reference twin.
// All are deterministic: results do not depend on thread count or batch size.
#pragma once

#include <cstdint>

namespace deltafin::cpu {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]   (variance in fp32). out may alias x.
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);
void rmsnorm_ref(const float* x, const float* weight, int64_t n, float eps, float* out);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
void silu_mul_ref(float* gate, const float* up, int64_t n);

// sum_i a[i] * b[i], fixed reduction order.
float dot(const float* a, const float* b, int64_t n);
float dot_ref(const float* a, const float* b, int64_t n);

// y[i] += alpha * x[i]
void axpy(float alpha, const float* x, float* y, int64_t n);
void axpy_ref(float alpha, const float* x, float* y, int64_t n);

// In-place softmax with max subtraction.
void softmax(float* x, int64_t n);
void softmax_ref(float* x, int64_t n);

}  // namespace deltafin::cpu
