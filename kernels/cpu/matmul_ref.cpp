// Reference twins of the matmul kernels: plain scalar loops, one element at a time, in index order.
// They define what the fast kernels compute and are only used by tests.
#include "cpu/matmul.hpp"

namespace deltafin::cpu {
namespace {

// W[r, k] as fp32, straight from the format's definition.
float element(const WeightView& w, int64_t r, int64_t k) {
  const int64_t i = r * w.cols + k;
  switch (w.format) {
    case WeightFormat::F32: return static_cast<const float*>(w.data)[i];
    case WeightFormat::F16: return f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case WeightFormat::BF16: return bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case WeightFormat::F8_E4M3_BLOCK128: {
      const float scale = w.scales[(r / 128) * w.scale_cols() + k / 128];
      return fp8_e4m3_to_f32(static_cast<const uint8_t*>(w.data)[i]) * scale;
    }
  }
  return 0.0f;
}

}  // namespace

void matmul_rows_ref(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y,
                     int64_t y_stride, int64_t row_begin, int64_t row_end) {
  for (int64_t t = 0; t < n_pos; ++t) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      float sum = 0.0f;
      for (int64_t k = 0; k < w.cols; ++k) sum += element(w, r, k) * x[t * x_stride + k];
      y[t * y_stride + r] = sum;
    }
  }
}

}  // namespace deltafin::cpu
