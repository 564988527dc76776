// A read-only view of one weight matrix as it lies in memory, in its stored format.
// Kernels dequantize on the fly; weights are never re-quantized or widened in place.
#pragma once

#include <cstdint>

#include "weights/dtype.hpp"

namespace deltafin {

// Storage formats a matrix can have. Block-fp8 is DeepSeek's e4m3 with one fp32 multiplier
// (`weight_scale_inv`) per 128x128 block; edge blocks may be partial.
enum class WeightFormat : uint8_t { F32, F16, BF16, F8_E4M3_BLOCK128 };

struct WeightView {
  WeightFormat format = WeightFormat::F32;
  const void* data = nullptr;     // [rows, cols] row-major in `format`
  int64_t rows = 0;               // output features
  int64_t cols = 0;               // input features
  const float* scales = nullptr;  // F8_E4M3_BLOCK128 only: [ceil(rows/128), ceil(cols/128)]

  int64_t scale_cols() const { return (cols + 127) / 128; }
};

}  // namespace deltafin
