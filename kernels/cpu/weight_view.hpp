// A read-only view of one weight matrix as it lies in memory, in its stored format.
// Kernels dequantize on the fly; weights are never re-quantized or widened in place.
#pragma once

#include <cstdint>

#include "cpu/weight_format.hpp"

namespace deltafin {

// A matrix in one of the stored formats (cpu/weight_format.hpp says how each lies in memory).
struct WeightView {
  WeightFormat format = WeightFormat::F32;
  const void* data = nullptr;     // [rows, cols] row-major in `format` (layouts: cpu/weight_format.hpp)
  int64_t rows = 0;               // output features
  int64_t cols = 0;               // input features
  const void* scales = nullptr;   // quantized formats only; layout per format (cpu/weight_format.hpp)

  // F8_E4M3_BLOCK128: scale columns (128-column blocks).
  int64_t scale_cols() const { return (cols + 127) / 128; }
  // MXFP4, INT4_G32: scales per row (32-column groups).
  int64_t group_cols() const { return (cols + 31) / 32; }
  // MXFP4, INT4_G32: bytes of `data` per row.
  int64_t packed_row_bytes() const { return static_cast<int64_t>(stored_row_bytes(format, static_cast<uint64_t>(cols))); }
};

}  // namespace deltafin
