// What every Metal kernel shares: exact decoders of stored weight elements (bit for bit
// cpu/matmul.hpp's definitions), weight_at() for element [r, k] of any format, the activations
// in the CPU backend's fp32 form, and threadgroup reductions in a fixed order (each simdgroup's
// simd_sum, then the simdgroups' partials summed in index order by every thread).
#pragma once

#include <metal_stdlib>

#include "metal_shared.h"

using namespace metal;

namespace dfm {

inline float f32_of_bits(uint bits) { return as_type<float>(bits); }
inline float bf16_to_f32(uint bits) { return as_type<float>(bits << 16); }
inline float f16_to_f32(uint bits) { return float(as_type<half>(ushort(bits))); }

// e4m3fn: exponent and mantissa placed under fp32's (bias 127, not 7), then times 2^120.
inline float e4m3_to_f32(uint b) {
  if ((b & 0x7fu) == 0x7fu) return as_type<float>(0x7fc00000u);
  return as_type<float>(((b & 0x7fu) << 20) | ((b & 0x80u) << 24)) * as_type<float>(247u << 23);
}
// E2M1 (low 4 bits): the same placement with bias 1, then times 2^126; code 8 is -0.
inline float e2m1_to_f32(uint code) {
  return as_type<float>(((code & 7u) << 22) | ((code & 8u) << 28)) * as_type<float>(253u << 23);
}
// E8M0: 2^(s - 127); s = 0 is the subnormal 2^-127, s = 255 NaN.
inline float e8m0_to_f32(uint s) { return as_type<float>((s << 23) | (s == 0u || s == 255u ? 0x00400000u : 0u)); }
// Offset-binary int4 (low 4 bits): code - 8 through the 2^23 magic number (exact).
inline float int4_to_f32(uint code) { return as_type<float>(0x4B000000u | (code & 15u)) - 8388616.0f; }

// W[r, k] of a weight in format F; data and scales are the bound pointers (skips applied here).
template <uint F>
inline float weight_at(constant WeightArgs& w, device const uchar* data, device const uchar* scales, uint r, uint k) {
  device const uchar* d = data + w.data_skip;
  device const uchar* s = scales + w.scales_skip;
  const ulong i = ulong(r) * ulong(w.cols) + ulong(k);
  if (F == kF32) return reinterpret_cast<device const float*>(d)[i];
  if (F == kF16) return f16_to_f32(reinterpret_cast<device const ushort*>(d)[i]);
  if (F == kBF16) return bf16_to_f32(reinterpret_cast<device const ushort*>(d)[i]);
  if (F == kF8E4M3Block128) {
    const uint scale_cols = (w.cols + 127u) / 128u;
    return e4m3_to_f32(d[i]) * reinterpret_cast<device const float*>(s)[(r / 128u) * scale_cols + k / 128u];
  }
  if (F == kMXFP4) {
    const uint byte = d[ulong(r) * ulong(w.cols / 2u) + ulong(k / 2u)];
    return e2m1_to_f32(byte >> (4u * (k % 2u))) * e8m0_to_f32(s[ulong(r) * ulong(w.cols / 32u) + ulong(k / 32u)]);
  }
  const uint words = (w.cols + 7u) / 8u, groups = (w.cols + 31u) / 32u;
  const uint word = reinterpret_cast<device const uint*>(d)[ulong(r) * ulong(words) + ulong(k / 8u)];
  const uint scale = reinterpret_cast<device const ushort*>(s)[ulong(r) * ulong(groups) + ulong(k / 32u)];
  return int4_to_f32(word >> (4u * (k % 8u))) * bf16_to_f32(scale);
}

// The same with the format chosen at run time (uniform across a dispatch).
inline float weight_at_any(constant WeightArgs& w, device const uchar* data, device const uchar* scales, uint r, uint k) {
  switch (w.format) {
    case kF32: return weight_at<kF32>(w, data, scales, r, k);
    case kF16: return weight_at<kF16>(w, data, scales, r, k);
    case kBF16: return weight_at<kBF16>(w, data, scales, r, k);
    case kF8E4M3Block128: return weight_at<kF8E4M3Block128>(w, data, scales, r, k);
    case kMXFP4: return weight_at<kMXFP4>(w, data, scales, r, k);
    default: return weight_at<kINT4G32>(w, data, scales, r, k);
  }
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// act(gate, up): silu(gate) * up, or [beta tanh(gate / beta) sigmoid(gate)] * [linear_beta tanh(up / linear_beta)].
inline float gated_act(constant ActArgs& a, float gate, float up) {
  if (a.kind == kSiLU) return (gate / (1.0f + exp(-gate))) * up;
  const float g = a.beta * tanh(gate / a.beta) * (1.0f / (1.0f + exp(-gate)));
  const float u = a.linear_beta > 0.0f ? a.linear_beta * tanh(up / a.linear_beta) : up;
  return g * u;
}

// Sum of v over the threadgroup (threads = 32 * simdgroups), the same value in every thread.
// scratch: >= simdgroups floats. Its barriers also order every earlier threadgroup access.
inline float tg_sum(float v, threadgroup float* scratch, uint lid, uint simdgroups) {
  const float s = simd_sum(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid % kSimdWidth == 0) scratch[lid / kSimdWidth] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0.0f;
  for (uint i = 0; i < simdgroups; ++i) total += scratch[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

inline float tg_max(float v, threadgroup float* scratch, uint lid, uint simdgroups) {
  const float s = simd_max(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid % kSimdWidth == 0) scratch[lid / kSimdWidth] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float top = scratch[0];
  for (uint i = 1; i < simdgroups; ++i) top = fmax(top, scratch[i]);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return top;
}

}  // namespace dfm
