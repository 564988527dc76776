// Weight rows read in 16-byte chunks (4 to 32 elements by format), shared by the matmul kernels
// (matmul.cu, expert_matmul.cu): a chunk's element count, a row's stored bytes, whether rows can
// be read as aligned vectors, the multiplier of a chunk (a chunk never straddles a block or
// group: 16 | 128, and the 4-bit formats' chunks are exactly their 32-column groups), and its
// elements dequantized exactly as weight_at() does, four at a time.
#pragma once

#include <cstdint>

#include "cuda/dequant.cuh"
#include "cuda/views.cuh"

namespace deltafin::cuda {

// Elements per 16-byte chunk.
__host__ __device__ constexpr int chunk_elems(WeightFormat f) {
  return f == WeightFormat::F32 ? 4 : f == WeightFormat::F16 || f == WeightFormat::BF16 ? 8 : f == WeightFormat::F8_E4M3_BLOCK128 ? 16 : 32;
}
template <WeightFormat F>
inline constexpr int kChunkElems = chunk_elems(F);

__host__ __device__ inline int64_t row_bytes(const WMat& w) {
  return static_cast<int64_t>(stored_row_bytes(w.format, static_cast<uint64_t>(w.cols)));
}

// Whether the rows can be read as 16-byte vectors (16-byte aligned).
__host__ __device__ inline bool vector_ok(const WMat& w) {
  return reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && row_bytes(w) % 16 == 0;
}

// The multiplier shared by all elements of chunk c of row r (a chunk never straddles a block
// or group: 16 | 128, and the 4-bit formats' chunks are exactly their 32-column groups).
template <WeightFormat F>
__device__ __forceinline__ float chunk_scale(const WMat& w, int64_t r, int64_t c) {
  if constexpr (F == WeightFormat::F8_E4M3_BLOCK128)
    return reinterpret_cast<const float*>(w.scales)[(r / 128) * ((w.cols + 127) / 128) + c / 8];
  else if constexpr (F == WeightFormat::MXFP4)
    return e8m0_to_f32(w.scales[r * (w.cols / 32) + c]);
  else if constexpr (F == WeightFormat::INT4_G32)
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(w.scales)[r * ((w.cols + 31) / 32) + c]);
  else
    return 1.0f;
}

// Elements 4q .. 4q + 3 of a chunk, dequantized exactly as weight_at() does.
template <WeightFormat F>
__device__ __forceinline__ float4 decode_quad(const uint4& raw, int q, float scale) {
  const uint32_t word[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (F == WeightFormat::F32) {
    return make_float4(__uint_as_float(word[0]), __uint_as_float(word[1]), __uint_as_float(word[2]),
                       __uint_as_float(word[3]));
  } else if constexpr (F == WeightFormat::F16 || F == WeightFormat::BF16) {
    const uint32_t a = word[2 * q], b = word[2 * q + 1];
    if constexpr (F == WeightFormat::BF16)
      return make_float4(bf16_to_f32(a & 0xffff), bf16_to_f32(a >> 16), bf16_to_f32(b & 0xffff), bf16_to_f32(b >> 16));
    else
      return make_float4(f16_to_f32(a & 0xffff), f16_to_f32(a >> 16), f16_to_f32(b & 0xffff), f16_to_f32(b >> 16));
  } else if constexpr (F == WeightFormat::F8_E4M3_BLOCK128) {
    const uint32_t v = word[q];
    return make_float4(e4m3_to_f32(v & 0xff) * scale, e4m3_to_f32((v >> 8) & 0xff) * scale,
                       e4m3_to_f32((v >> 16) & 0xff) * scale, e4m3_to_f32(v >> 24) * scale);
  } else {
    const uint32_t v = word[q / 2] >> (16 * (q % 2));  // four 4-bit codes, column order
    if constexpr (F == WeightFormat::MXFP4)
      return make_float4(e2m1_to_f32(v) * scale, e2m1_to_f32(v >> 4) * scale, e2m1_to_f32(v >> 8) * scale,
                         e2m1_to_f32(v >> 12) * scale);
    else
      return make_float4(int4_to_f32(v) * scale, int4_to_f32(v >> 4) * scale, int4_to_f32(v >> 8) * scale,
                         int4_to_f32(v >> 12) * scale);
  }
}

}  // namespace deltafin::cuda
