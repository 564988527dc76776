// Random finite weight matrices in every stored format, owning their storage, for the kernel
// tests and the backend parity harness.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/matmul.hpp"
#include "cpu/weight_view.hpp"

namespace deltafin::test {

inline constexpr const auto& kFormats = kWeightFormats;
inline const char* format_name(WeightFormat f) { return weight_format_name(f); }

// A random finite matrix in one format, owning its storage.
struct TestMatrix {
  WeightFormat format;
  int64_t rows, cols;
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  std::vector<uint8_t> u8;
  std::vector<uint32_t> u32;
  std::vector<float> scales;        // F8_E4M3_BLOCK128
  std::vector<uint8_t> scales_u8;   // MXFP4: E8M0
  std::vector<uint16_t> scales_u16; // INT4_G32: bf16

  uint64_t data_bytes() const { return 4 * f32.size() + 2 * u16.size() + u8.size() + 4 * u32.size(); }
  uint64_t scale_bytes() const { return 4 * scales.size() + scales_u8.size() + 2 * scales_u16.size(); }

  WeightView view() const {
    WeightView w;
    w.format = format;
    w.rows = rows;
    w.cols = cols;
    switch (format) {
      case WeightFormat::F32: w.data = f32.data(); break;
      case WeightFormat::F16:
      case WeightFormat::BF16: w.data = u16.data(); break;
      case WeightFormat::F8_E4M3_BLOCK128: w.data = u8.data(); w.scales = scales.data(); break;
      case WeightFormat::MXFP4: w.data = u8.data(); w.scales = scales_u8.data(); break;
      case WeightFormat::INT4_G32: w.data = u32.data(); w.scales = scales_u16.data(); break;
    }
    return w;
  }
};

inline TestMatrix random_matrix(WeightFormat format, int64_t rows, int64_t cols, std::mt19937& rng) {
  TestMatrix m{format, rows, cols, {}, {}, {}, {}, {}, {}, {}};
  const auto n = static_cast<size_t>(rows * cols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> bits16(0, 0xffff);
  switch (format) {
    case WeightFormat::F32:
      for (size_t i = 0; i < n; ++i) m.f32.push_back(normal(rng));
      break;
    case WeightFormat::BF16:  // the top half of a normal fp32: always finite
      for (size_t i = 0; i < n; ++i) {
        uint32_t bits;
        const float v = normal(rng);
        std::memcpy(&bits, &v, 4);
        m.u16.push_back(static_cast<uint16_t>(bits >> 16));
      }
      break;
    case WeightFormat::F16:  // any finite code, subnormals included
      for (size_t i = 0; i < n; ++i) {
        uint16_t code;
        do code = static_cast<uint16_t>(bits16(rng));
        while (((code >> 10) & 0x1f) == 31);
        m.u16.push_back(code);
      }
      break;
    case WeightFormat::F8_E4M3_BLOCK128: {  // any non-NaN code, scales per 128x128 block
      for (size_t i = 0; i < n; ++i) {
        uint8_t code;
        do code = static_cast<uint8_t>(bits16(rng) & 0xff);
        while ((code & 0x7f) == 0x7f);
        m.u8.push_back(code);
      }
      std::uniform_real_distribution<float> scale(1e-3f, 1e-1f);
      const int64_t blocks = ((rows + 127) / 128) * ((cols + 127) / 128);
      for (int64_t i = 0; i < blocks; ++i) m.scales.push_back(scale(rng));
      break;
    }
    case WeightFormat::MXFP4: {  // any codes; exponents 2^-17..2^3, now and then 2^-127 (subnormal)
      REQUIRE(cols % 32 == 0);
      for (int64_t i = 0; i < rows * cols / 2; ++i) m.u8.push_back(static_cast<uint8_t>(bits16(rng) & 0xff));
      std::uniform_int_distribution<int> exponent(110, 130);
      for (int64_t i = 0; i < rows * cols / 32; ++i)
        m.scales_u8.push_back(static_cast<uint8_t>(bits16(rng) % 50 == 0 ? 0 : exponent(rng)));
      break;
    }
    case WeightFormat::INT4_G32: {  // any words (padding nibbles too); bf16 scales of either sign
      const int64_t words = (cols + 7) / 8, groups = (cols + 31) / 32;
      for (int64_t i = 0; i < rows * words; ++i) {
        const auto high = static_cast<uint32_t>(bits16(rng));
        m.u32.push_back(high << 16 | static_cast<uint32_t>(bits16(rng)));
      }
      for (int64_t i = 0; i < rows * groups; ++i) {
        uint32_t bits;
        const float v = 0.02f * normal(rng);
        std::memcpy(&bits, &v, 4);
        m.scales_u16.push_back(static_cast<uint16_t>(bits >> 16));
      }
      break;
    }
  }
  return m;
}

}  // namespace deltafin::test
