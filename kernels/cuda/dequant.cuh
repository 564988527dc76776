// Exact decoders of stored weight elements on the device, bit for bit the definitions of
// cpu/matmul.hpp (e2m1, E8M0, e4m3fn, bf16, f16, offset-binary int4), and weight_at(): element
// [r, k] of any format, the twin of cpu::weight_element_ref. Every kernel that reads weights
// decodes through these. No conversion instructions where bit tricks are exact and cheaper.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/views.cuh"

namespace deltafin::cuda {

__device__ __forceinline__ float bf16_to_f32(uint32_t bits) { return __uint_as_float(bits << 16); }

__device__ __forceinline__ float f16_to_f32(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// e4m3fn: its exponent and mantissa placed under fp32's (exponent bias 127 instead of 7, so the
// subnormals land on fp32 subnormals), then scaled by 2^120; 0x7f and 0xff are NaN.
__device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
  if ((b & 0x7f) == 0x7f) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(((b & 0x7f) << 20) | ((b & 0x80) << 24)) * 0x1p120f;
}

// E2M1 (low 4 bits): the same placement, bias 1 instead of 127, then scaled by 2^126.
// Magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}; code 8 is -0.
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  return __uint_as_float(((code & 7) << 22) | ((code & 8) << 28)) * 0x1p126f;
}

// E8M0: 2^(s - 127) from the exponent bits; s = 0 is the subnormal 2^-127, s = 255 NaN.
__device__ __forceinline__ float e8m0_to_f32(uint32_t s) {
  return __uint_as_float((s << 23) | (s == 0 || s == 255 ? 0x00400000u : 0u));
}

// Offset-binary int4 (low 4 bits): code - 8, through the 2^23 magic number (exact, no I2F).
__device__ __forceinline__ float int4_to_f32(uint32_t code) {
  return __uint_as_float(0x4B000000u | (code & 15)) - 8388616.0f;
}

// W[r, k] of format F, as cpu::weight_element_ref computes it.
template <WeightFormat F>
__device__ __forceinline__ float weight_at(const WMat& w, int64_t r, int64_t k) {
  const int64_t i = r * w.cols + k;
  if constexpr (F == WeightFormat::F32) {
    return reinterpret_cast<const float*>(w.data)[i];
  } else if constexpr (F == WeightFormat::F16) {
    return f16_to_f32(reinterpret_cast<const uint16_t*>(w.data)[i]);
  } else if constexpr (F == WeightFormat::BF16) {
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(w.data)[i]);
  } else if constexpr (F == WeightFormat::F8_E4M3_BLOCK128) {
    const float scale = reinterpret_cast<const float*>(w.scales)[(r / 128) * ((w.cols + 127) / 128) + k / 128];
    return e4m3_to_f32(w.data[i]) * scale;
  } else if constexpr (F == WeightFormat::MXFP4) {
    const uint32_t byte = w.data[r * (w.cols / 2) + k / 2];
    return e2m1_to_f32(byte >> (4 * (k % 2))) * e8m0_to_f32(w.scales[r * (w.cols / 32) + k / 32]);
  } else {
    const uint32_t word = reinterpret_cast<const uint32_t*>(w.data)[r * ((w.cols + 7) / 8) + k / 8];
    const uint32_t scale = reinterpret_cast<const uint16_t*>(w.scales)[r * ((w.cols + 31) / 32) + k / 32];
    return int4_to_f32(word >> (4 * (k % 8))) * bf16_to_f32(scale);
  }
}

// The same with the format chosen at run time (uniform across a launch).
__device__ __forceinline__ float weight_at(const WMat& w, int64_t r, int64_t k) {
  switch (w.format) {
    case WeightFormat::F32: return weight_at<WeightFormat::F32>(w, r, k);
    case WeightFormat::F16: return weight_at<WeightFormat::F16>(w, r, k);
    case WeightFormat::BF16: return weight_at<WeightFormat::BF16>(w, r, k);
    case WeightFormat::F8_E4M3_BLOCK128: return weight_at<WeightFormat::F8_E4M3_BLOCK128>(w, r, k);
    case WeightFormat::MXFP4: return weight_at<WeightFormat::MXFP4>(w, r, k);
    case WeightFormat::INT4_G32: return weight_at<WeightFormat::INT4_G32>(w, r, k);
  }
  return 0.0f;
}

}  // namespace deltafin::cuda
