// Matrix-vector products for every weight format: y [n, w.rows] = x [n, w.cols] . W^T.
// Mapping: a threadgroup of kSimdgroups simdgroups covers kMatmulRowsPerGroup output rows of one
// x row (grid y); simdgroup s computes rows base + s * kMatmulRowsPerSimdgroup + i one after the
// other. Lane l sums the products of columns l, l + 32, ... by fma in ascending order, then
// simd_sum: an order fixed by the shape alone, so a row gives the same bits in any batch.
// The weight is read as stored (MXFP4 in K3's checkpoint layout with its separate E8M0 scales,
// no repack); the format is a template parameter, chosen once per dispatch.
//
// Expert mode (a.expert != 0): grid row p is slot slots[p] of an expert's list (p >= count[0]:
// the simdgroups leave at once), so one dispatch runs exactly the rows that chose the expert;
// with a.pair the gate and up weights are both read and the activation applied, fusing
// gate + up + act into one dispatch.
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

template <uint F>
inline float row_dot(constant WeightArgs& w, device const uchar* data, device const uchar* scales, uint r,
                     device const float* x, uint lane) {
  float acc = 0.0f;
  for (uint k = lane; k < w.cols; k += kSimdWidth) acc = fma(weight_at<F>(w, data, scales, r, k), x[k], acc);
  return simd_sum(acc);
}

inline float dot_any(constant WeightArgs& w, device const uchar* data, device const uchar* scales, uint r,
                     device const float* x, uint lane) {
  switch (w.format) {
    case kF32: return row_dot<kF32>(w, data, scales, r, x, lane);
    case kF16: return row_dot<kF16>(w, data, scales, r, x, lane);
    case kBF16: return row_dot<kBF16>(w, data, scales, r, x, lane);
    case kF8E4M3Block128: return row_dot<kF8E4M3Block128>(w, data, scales, r, x, lane);
    case kMXFP4: return row_dot<kMXFP4>(w, data, scales, r, x, lane);
    default: return row_dot<kINT4G32>(w, data, scales, r, x, lane);
  }
}

kernel void df_matmul(constant MatmulArgs& a [[buffer(0)]], device const uchar* data0 [[buffer(kMatmulData0)]],
                      device const uchar* scales0 [[buffer(kMatmulScales0)]],
                      device const uchar* data1 [[buffer(kMatmulData1)]],
                      device const uchar* scales1 [[buffer(kMatmulScales1)]], device const float* x [[buffer(kMatmulX)]],
                      device float* y [[buffer(kMatmulY)]], device const int* slots [[buffer(kMatmulSlots)]],
                      device const int* count [[buffer(kMatmulCount)]], threadgroup float* tg [[threadgroup(0)]],
                      uint3 group [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  const uint lane = lid % kSimdWidth, sg = lid / kSimdWidth;
  uint x_row = group.y, y_row = group.y;
  if (a.expert != 0u) {
    if (int(group.y) >= count[0]) return;  // uniform over the threadgroup
    const uint slot = uint(slots[group.y]);
    x_row = a.in_by_slot != 0u ? slot : slot / a.k;
    y_row = a.out_by_slot != 0u ? slot : slot / a.k;
  }
  device const float* xr = x + x_row * a.x.stride;
  for (uint i = 0; i < kMatmulRowsPerSimdgroup; ++i) {
    const uint r = group.x * kMatmulRowsPerGroup + sg * kMatmulRowsPerSimdgroup + i;
    if (r >= a.w0.rows) return;  // whole simdgroups leave
    float v = dot_any(a.w0, data0, scales0, r, xr, lane);
    if (a.pair != 0u) v = gated_act(a.act, v, dot_any(a.w1, data1, scales1, r, xr, lane));
    if (lane == 0u) y[y_row * a.y.stride + r] = v;
  }
}
