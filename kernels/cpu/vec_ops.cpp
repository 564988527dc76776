// Fast vector operations of the forward pass, compiled for every SIMD target and dispatched at
// run time (simd_target.hpp).
//
// Determinism: reductions (dot, the rmsnorm sum of squares) use four vector accumulators fed in
// turn, a fixed combination, a lane reduction and a scalar tail in index order, so a result
// depends only on the inputs and n. Element-wise results never depend on an element's position:
// the scalar tails repeat the vector arithmetic (fused where the target fuses).
// silu_mul and softmax stay scalar with std::exp: accuracy against torch matters more there.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/vec_ops.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "cpu/vec_ops.hpp"

HWY_BEFORE_NAMESPACE();
namespace deltafin::cpu::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// a * b + c as the vector MulAdd computes it on this target: fused where the target has FMA.
inline float mul_add(float a, float b, float c) {
#if HWY_NATIVE_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// sum_i a[i] * b[i] by the fixed recipe above; a == b gives the sum of squares.
float dot_fixed(const float* a, const float* b, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df), acc2 = hn::Zero(df), acc3 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + lanes), hn::LoadU(df, b + i + lanes), acc1);
    acc2 = hn::MulAdd(hn::LoadU(df, a + i + 2 * lanes), hn::LoadU(df, b + i + 2 * lanes), acc2);
    acc3 = hn::MulAdd(hn::LoadU(df, a + i + 3 * lanes), hn::LoadU(df, b + i + 3 * lanes), acc3);
  }
  for (; i + lanes <= n; i += lanes) acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3))));
  for (; i < n; ++i) sum = mul_add(a[i], b[i], sum);
  return sum;
}

}  // namespace

void Rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float inv = 1.0f / std::sqrt(dot_fixed(x, x, n) / static_cast<float>(n) + eps);
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF vinv = hn::Set(df, inv);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), vinv), hn::LoadU(df, weight + i)), df, out + i);
  for (; i < n; ++i) out[i] = (x[i] * inv) * weight[i];
}

float Dot(const float* a, const float* b, int64_t n) { return dot_fixed(a, b, n); }

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF valpha = hn::Set(df, alpha);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::MulAdd(valpha, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] = mul_add(alpha, x[i], y[i]);
}

}  // namespace deltafin::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::cpu {

HWY_EXPORT(Rmsnorm);
HWY_EXPORT(Dot);
HWY_EXPORT(Axpy);

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(Rmsnorm)(x, weight, n, eps, out);
}
float dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n); }
void axpy(float alpha, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(Axpy)(alpha, x, y, n); }

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float z = gate[i];
    gate[i] = (z / (1.0f + std::exp(-z))) * up[i];
  }
}

// Max (order-free), exp in place, sum in double in index order, divide by the sum.
void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float total = static_cast<float>(sum);
  for (int64_t i = 0; i < n; ++i) x[i] /= total;
}

}  // namespace deltafin::cpu
#endif  // HWY_ONCE
