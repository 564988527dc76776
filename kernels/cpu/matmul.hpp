// Dequantizing matrix products for the CPU backend, each with a plain reference twin.
//
// Batch invariance: y[t, r] is accumulated in the same order whatever n_pos is and whichever
// row range a thread gets, so a pass over k positions gives bit-identical rows to k passes
// over one position, at any thread count. Accumulation is fp32.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/weight_view.hpp"

namespace deltafin::cpu {

// y[t * y_stride + r] = sum_k W[r, k] * x[t * x_stride + k]
// for t in [0, n_pos), r in [row_begin, row_end).  x: [n_pos, W.cols], y: [n_pos, W.rows].
void matmul_rows(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y,
                 int64_t y_stride, int64_t row_begin, int64_t row_end);

// Plain scalar twin of matmul_rows (dequantize each element, multiply, add in index order).
void matmul_rows_ref(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y,
                     int64_t y_stride, int64_t row_begin, int64_t row_end);

// W[r, k] as fp32, straight from the format's definition (the twins' decoder).
float weight_element_ref(const WeightView& w, int64_t r, int64_t k);

// Dequantizes row r of W into out[W.cols] (fp32).
void dequantize_row(const WeightView& w, int64_t r, float* out);

// Exact scalar decoders of single stored elements: the definitions the fast paths are tested
// against.
constexpr float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

inline float f16_to_f32(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  float magnitude = std::numeric_limits<float>::infinity();
  if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal
  else if (exponent < 31)
    magnitude = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  else if (mantissa != 0)
    magnitude = std::numeric_limits<float>::quiet_NaN();
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// e4m3fn: sign 1, exponent 4 (bias 7), mantissa 3; no infinities, 0x7f/0xff are NaN.
inline float fp8_e4m3_to_f32(uint8_t bits) {
  if ((bits & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)  // 2^-6 * m/8
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (bits & 0x80) ? -magnitude : magnitude;
}

// OCP fp4 E2M1 (low 4 bits of `code`): bit 3 sign, bits 0..2 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
// Code 8 is -0.
inline float e2m1_to_f32(uint8_t code) {
  constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitude[code & 7];
  return (code & 8) ? -magnitude : magnitude;
}

// OCP E8M0 scale: 2^(s - 127), built from the exponent bits: s << 23 for s in 1..254; s = 0 is
// the subnormal 2^-127 (mantissa bit 22); s = 255 is NaN (exponent all ones, mantissa bit 22).
constexpr float e8m0_to_f32(uint8_t s) {
  const uint32_t bits = (uint32_t{s} << 23) | (s == 0 || s == 255 ? 0x00400000u : 0u);
  return std::bit_cast<float>(bits);
}

// Offset-binary int4 (low 4 bits of `code`): q = code - 8 in [-8, 7].
inline float int4_to_f32(uint8_t code) { return static_cast<float>(int{code & 15} - 8); }

}  // namespace deltafin::cpu
