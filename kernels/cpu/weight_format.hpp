// The stored formats of a weight matrix, and the one table of how each lies in memory: bytes per
// row of its data, bytes of its scales, and the alignment each is read at. Every size of a stored
// matrix (the memory plan's, the device backends' uploads and checks, the kernels' row strides)
// comes from here. Plain C++17 so that nvcc compiles it too; the functions run on the device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DELTAFIN_HOST_DEVICE __host__ __device__
#else
#define DELTAFIN_HOST_DEVICE
#endif

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

// How a format lies in memory (the layouts above). Data: units of `data_unit` bytes, each holding
// `cols_per_unit` columns of one row, a row padded to whole units. Scales: one `scale_unit`-byte
// value per `scale_rows` x `scale_cols` block, edge blocks partial (scale_unit 0: no scales).
// Data and scales are read in their units, so a unit's size is also the alignment they need.
struct StoredLayout {
  uint32_t data_unit, cols_per_unit;
  uint32_t scale_unit, scale_rows, scale_cols;
};

// The table: one line per format.
DELTAFIN_HOST_DEVICE constexpr StoredLayout stored_layout(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return {4, 1, 0, 1, 1};
    case WeightFormat::F16: return {2, 1, 0, 1, 1};
    case WeightFormat::BF16: return {2, 1, 0, 1, 1};
    case WeightFormat::F8_E4M3_BLOCK128: return {1, 1, 4, 128, 128};
    case WeightFormat::MXFP4: return {1, 2, 1, 1, 32};
    case WeightFormat::INT4_G32: return {4, 8, 2, 1, 32};
  }
  return {0, 1, 0, 1, 1};
}

// Bytes of one row of a [rows, cols] matrix's data.
DELTAFIN_HOST_DEVICE constexpr uint64_t stored_row_bytes(WeightFormat f, uint64_t cols) {
  const StoredLayout l = stored_layout(f);
  return (cols + l.cols_per_unit - 1) / l.cols_per_unit * l.data_unit;
}
// Bytes of a [rows, cols] matrix's data, of its scales (0 for the plain formats), and both.
DELTAFIN_HOST_DEVICE constexpr uint64_t stored_data_bytes(WeightFormat f, uint64_t rows, uint64_t cols) {
  return rows * stored_row_bytes(f, cols);
}
DELTAFIN_HOST_DEVICE constexpr uint64_t stored_scale_bytes(WeightFormat f, uint64_t rows, uint64_t cols) {
  const StoredLayout l = stored_layout(f);
  return (rows + l.scale_rows - 1) / l.scale_rows * ((cols + l.scale_cols - 1) / l.scale_cols) * l.scale_unit;
}
DELTAFIN_HOST_DEVICE constexpr uint64_t stored_bytes(WeightFormat f, uint64_t rows, uint64_t cols) {
  return stored_data_bytes(f, rows, cols) + stored_scale_bytes(f, rows, cols);
}
// The alignment the data and the scales are read at (bytes).
DELTAFIN_HOST_DEVICE constexpr uint64_t data_alignment(WeightFormat f) { return stored_layout(f).data_unit; }
DELTAFIN_HOST_DEVICE constexpr uint64_t scale_alignment(WeightFormat f) {
  return stored_layout(f).scale_unit ? stored_layout(f).scale_unit : 1;
}

}  // namespace deltafin
