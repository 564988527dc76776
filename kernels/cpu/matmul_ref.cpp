// Reference twins of the matmul kernels: plain scalar loops, one element at a time, in index order.
// They define what the fast kernels compute and are only used by tests.
#include "cpu/matmul.hpp"

namespace deltafin::cpu {

float weight_element_ref(const WeightView& w, int64_t r, int64_t k) {
  const int64_t i = r * w.cols + k;
  switch (w.format) {
    case WeightFormat::F32: return static_cast<const float*>(w.data)[i];
    case WeightFormat::F16: return f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case WeightFormat::BF16: return bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case WeightFormat::F8_E4M3_BLOCK128: {
      const float scale = static_cast<const float*>(w.scales)[(r / 128) * w.scale_cols() + k / 128];
      return fp8_e4m3_to_f32(static_cast<const uint8_t*>(w.data)[i]) * scale;
    }
    case WeightFormat::MXFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (w.cols / 2) + k / 2];
      const uint8_t code = static_cast<uint8_t>((byte >> (4 * (k % 2))) & 0xf);
      const uint8_t scale = static_cast<const uint8_t*>(w.scales)[r * (w.cols / 32) + k / 32];
      return e2m1_to_f32(code) * e8m0_to_f32(scale);
    }
    case WeightFormat::INT4_G32: {
      const int64_t words = (w.cols + 7) / 8;
      const uint32_t word = static_cast<const uint32_t*>(w.data)[r * words + k / 8];
      const uint8_t code = static_cast<uint8_t>((word >> (4 * (k % 8))) & 0xf);
      const uint16_t scale = static_cast<const uint16_t*>(w.scales)[r * ((w.cols + 31) / 32) + k / 32];
      return int4_to_f32(code) * bf16_to_f32(scale);
    }
  }
  return 0.0f;
}

void matmul_rows_ref(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y,
                     int64_t y_stride, int64_t row_begin, int64_t row_end) {
  for (int64_t t = 0; t < n_pos; ++t) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      float sum = 0.0f;
      for (int64_t k = 0; k < w.cols; ++k) sum += weight_element_ref(w, r, k) * x[t * x_stride + k];
      y[t * y_stride + r] = sum;
    }
  }
}

}  // namespace deltafin::cpu
