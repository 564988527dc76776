// A read-only view of one weight matrix as it lies in memory, in its stored format.
// Kernels dequantize on the fly; weights are never re-quantized or widened in place.
#pragma once

#include <cstdint>

#include "weights/dtype.hpp"

namespace deltafin {

// Storage formats a matrix can have:
//   F32, F16, BF16       plain [rows, cols]
//   F8_E4M3_BLOCK128     DeepSeek block fp8: e4m3 [rows, cols] and one fp32 multiplier
//                        (`weight_scale_inv`) per 128x128 block, edge blocks may be partial;
//                        scales: float [ceil(rows/128), ceil(cols/128)]
//   MXFP4                OCP MX fp4 (Kimi K3 experts, compressed-tensors mxfp4-pack-quantized):
//                        data: uint8 [rows, cols/2], byte j of a row holds column 2j in its low
//                        nibble and 2j+1 in its high nibble, each an E2M1 code (bit 3 sign,
//                        magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6});
//                        scales: uint8 E8M0 [rows, cols/32], one per 32 columns, 2^(s - 127)
//                        (s = 0: 2^-127; s = 255: NaN); cols must be a multiple of 32
//   INT4_G32             symmetric int4, group 32 (Kimi K2 Thinking / K2.5 experts,
//                        compressed-tensors pack-quantized): data: int32 words [rows, ceil(cols/8)],
//                        little-endian, column j in word j/8 at bits 4*(j%8), stored offset-binary
//                        u = q + 8 (q in [-8, 7]), rows padded with zeros to whole words;
//                        scales: bf16 [rows, ceil(cols/32)]; W[r, j] = q * scale[r, j/32]
enum class WeightFormat : uint8_t { F32, F16, BF16, F8_E4M3_BLOCK128, MXFP4, INT4_G32 };

// Every format, and each one's name (tests and self-checks iterate over them).
inline constexpr WeightFormat kWeightFormats[] = {WeightFormat::F32, WeightFormat::F16, WeightFormat::BF16,
                                                  WeightFormat::F8_E4M3_BLOCK128, WeightFormat::MXFP4,
                                                  WeightFormat::INT4_G32};
inline const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "F32";
    case WeightFormat::F16: return "F16";
    case WeightFormat::BF16: return "BF16";
    case WeightFormat::F8_E4M3_BLOCK128: return "F8_E4M3_BLOCK128";
    case WeightFormat::MXFP4: return "MXFP4";
    case WeightFormat::INT4_G32: return "INT4_G32";
  }
  return "?";
}

struct WeightView {
  WeightFormat format = WeightFormat::F32;
  const void* data = nullptr;     // [rows, cols] row-major in `format` (packed formats: above)
  int64_t rows = 0;               // output features
  int64_t cols = 0;               // input features
  const void* scales = nullptr;   // quantized formats only; layout per format (above)

  // F8_E4M3_BLOCK128: scale columns (128-column blocks).
  int64_t scale_cols() const { return (cols + 127) / 128; }
  // MXFP4, INT4_G32: scales per row (32-column groups).
  int64_t group_cols() const { return (cols + 31) / 32; }
  // MXFP4, INT4_G32: bytes of `data` per row.
  int64_t packed_row_bytes() const { return format == WeightFormat::MXFP4 ? cols / 2 : (cols + 7) / 8 * 4; }
};

}  // namespace deltafin
