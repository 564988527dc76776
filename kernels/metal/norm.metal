// RMSNorm per row: out = x * (1 / sqrt(sum(x^2) / cols + eps)) * weight. One threadgroup of
// kThreads per row; thread i sums the squares of columns i, i + kThreads, ... by fma in order,
// then tg_sum's fixed order. Every thread reads its columns before any is written (the
// reduction's barriers lie between), so out may alias x.
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

// x [n, cols], weight [cols] -> out [n, cols]; tg: kSimdgroups floats.
kernel void df_rmsnorm(constant RmsnormArgs& a [[buffer(0)]], device const float* x [[buffer(kRmsnormX)]],
                       device const float* weight [[buffer(kRmsnormWeight)]], device float* out [[buffer(kRmsnormOut)]],
                       threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                       uint lid [[thread_index_in_threadgroup]]) {
  device const float* xr = x + group.y * a.x.stride;
  float sum = 0.0f;
  for (uint i = lid; i < a.x.cols; i += kThreads) sum = fma(xr[i], xr[i], sum);
  const float inv = 1.0f / sqrt(tg_sum(sum, tg, lid, kSimdgroups) / float(a.x.cols) + a.eps);
  device float* o = out + group.y * a.out.stride;
  for (uint i = lid; i < a.x.cols; i += kThreads) o[i] = (xr[i] * inv) * weight[i];
}
