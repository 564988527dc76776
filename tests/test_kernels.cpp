// CPU kernel tests: every fast kernel against its reference twin on random data, the element
// decoders against their format definitions, batch invariance of matmul_rows (bit-exact across
// n_pos, strides, row ranges and thread counts; ThreadPool itself: test_thread_pool.cpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/matmul.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/vec_ops.hpp"
#include "random_weights.hpp"
#include "test_util.hpp"

using namespace deltafin;
using namespace deltafin::cpu;
using namespace deltafin::test;

namespace {


// W[r, k] of a packed test matrix, straight from the format definitions (weight_view.hpp).
float packed_element(const TestMatrix& m, int64_t r, int64_t k) {
  if (m.format == WeightFormat::MXFP4) {
    const int code = (m.u8[r * (m.cols / 2) + k / 2] >> (4 * (k % 2))) & 0xf;
    const int s = m.scales_u8[r * (m.cols / 32) + k / 32];
    const double magnitude = std::ldexp(std::array<double, 8>{0, 0.5, 1, 1.5, 2, 3, 4, 6}[code & 7], s - 127);
    return s == 255 ? NAN : static_cast<float>((code & 8) ? -magnitude : magnitude);
  }
  const int64_t words = (m.cols + 7) / 8, groups = (m.cols + 31) / 32;
  const int u = static_cast<int>((m.u32[r * words + k / 8] >> (4 * (k % 8))) & 0xf);
  return static_cast<float>((u - 8) * double{bf16_to_f32(m.scales_u16[r * groups + k / 32])});
}

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = normal(rng);
  return v;
}

// The largest |fast - ref| of a matmul, in units of sum_k |W[r,k] x[t,k]| (the scale of the
// rounding error any summation order can make).
double matmul_error(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos,
                    const float* y_fast, const float* y_ref, int64_t y_stride) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  double worst = 0.0;
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n_pos; ++t) {
      double magnitude = 1e-30;
      for (int64_t k = 0; k < w.cols; ++k)
        magnitude += std::fabs(double{row[k]} * x[t * x_stride + k]);
      const double diff = std::fabs(double{y_fast[t * y_stride + r]} - y_ref[t * y_stride + r]);
      worst = std::max(worst, diff / magnitude);
    }
  }
  return worst;
}

// matmul_rows against matmul_rows_ref at n_pos positions, with padded strides: within rounding
// error, and nothing written past the rows.
void check_matmul_against_ref(const WeightView& w, int64_t n_pos, std::mt19937& rng) {
  const int64_t rows = w.rows, cols = w.cols, x_stride = cols + 3, y_stride = rows + 1;
  const auto x = random_vector(static_cast<size_t>(n_pos * x_stride), rng);
  std::vector<float> y_fast(n_pos * y_stride, -1.0f), y_ref(n_pos * y_stride, -1.0f);
  matmul_rows(w, x.data(), x_stride, n_pos, y_fast.data(), y_stride, 0, rows);
  matmul_rows_ref(w, x.data(), x_stride, n_pos, y_ref.data(), y_stride, 0, rows);
  CAPTURE(format_name(w.format), rows, cols, n_pos);
  CHECK(matmul_error(w, x.data(), x_stride, n_pos, y_fast.data(), y_ref.data(), y_stride) < 1e-5);
  for (int64_t t = 0; t < n_pos; ++t) CHECK(y_fast[t * y_stride + rows] == -1.0f);  // padding
}

// Bit-equal, or both NaN.
bool same_value(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("bf16 and f16 decode known values", "[kernels]") {
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(bf16_to_f32(0xc000) == -2.0f);
  CHECK(bf16_to_f32(0x0000) == 0.0f);
  CHECK(std::signbit(bf16_to_f32(0x8000)));
  CHECK(bf16_to_f32(0x7f80) == INFINITY);
  CHECK(std::isnan(bf16_to_f32(0x7fc0)));

  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc000) == -2.0f);
  CHECK(f16_to_f32(0x3555) == 0x1.554p-2f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_f32(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0xfc00) == -INFINITY);
  CHECK(std::isnan(f16_to_f32(0x7e00)));
}

TEST_CASE("fp8 e4m3 decode of all 256 codes", "[kernels]") {
  for (int code = 0; code < 256; ++code) {
    CAPTURE(code);
    const int sign = code >> 7, exponent = (code >> 3) & 0xf, mantissa = code & 7;
    const float got = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    if (exponent == 15 && mantissa == 7) {
      CHECK(std::isnan(got));
      continue;
    }
    const double magnitude = exponent == 0 ? std::pow(2.0, -6) * mantissa / 8.0
                                           : std::pow(2.0, exponent - 7) * (1.0 + mantissa / 8.0);
    CHECK(double{got} == (sign ? -magnitude : magnitude));
    CHECK(std::signbit(got) == (sign == 1));
  }
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
}

TEST_CASE("dequantize_row matches the scalar decoders for every code", "[kernels]") {
  test::for_each_simd_target([&](const std::string&) {
    // 2 rows x 300 columns: every code (NaNs included) at several lane offsets, a partial third
    // scale block and a scalar tail.
    const int64_t rows = 2, cols = 300;
    std::vector<uint8_t> fp8(rows * cols);
    std::vector<uint16_t> half(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      fp8[i] = static_cast<uint8_t>((i * 7) & 0xff);
      half[i] = static_cast<uint16_t>(i * 0x9e37);
    }
    const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0400,
                                0x7bff, 0x7c00, 0xfc00, 0x7e00, 0xffff};
    std::copy(std::begin(special), std::end(special), half.begin() + 3);
    const std::vector<float> scales = {0.375f, 1.0f / 3.0f, 5.0f};  // [1, ceil(300/128)]
    std::vector<float> out(cols);

    WeightView w;
    w.rows = rows;
    w.cols = cols;
    w.format = WeightFormat::F8_E4M3_BLOCK128;
    w.data = fp8.data();
    w.scales = scales.data();
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, out.data());
      for (int64_t k = 0; k < cols; ++k) {
        const float want = fp8_e4m3_to_f32(fp8[r * cols + k]) * scales[k / 128];
        CAPTURE(r, k, int{fp8[r * cols + k]});
        CHECK(same_value(want, out[k]));
      }
    }

    for (WeightFormat f : {WeightFormat::F16, WeightFormat::BF16}) {
      w.format = f;
      w.data = half.data();
      w.scales = nullptr;
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(w, r, out.data());
        for (int64_t k = 0; k < cols; ++k) {
          const uint16_t code = half[r * cols + k];
          const float want = f == WeightFormat::F16 ? f16_to_f32(code) : bf16_to_f32(code);
          CAPTURE(format_name(f), r, k, code);
          CHECK(same_value(want, out[k]));
        }
      }
    }
  });
}

TEST_CASE("E2M1, E8M0 and int4 decode of every code", "[kernels]") {
  const double magnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  for (int code = 0; code < 16; ++code) {
    CAPTURE(code);
    const float got = e2m1_to_f32(static_cast<uint8_t>(code));
    CHECK(double{got} == ((code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7]));
    CHECK(std::signbit(got) == ((code & 8) != 0));  // code 8 is -0
    CHECK(int4_to_f32(static_cast<uint8_t>(code)) == static_cast<float>(code - 8));
  }
  for (int s = 0; s < 256; ++s) {
    CAPTURE(s);
    const float got = e8m0_to_f32(static_cast<uint8_t>(s));
    if (s == 255) {
      CHECK(std::isnan(got));
      continue;
    }
    CHECK(double{got} == std::ldexp(1.0, s - 127));
  }
  CHECK(e8m0_to_f32(0) == std::ldexp(1.0f, -127));
  CHECK(std::fpclassify(e8m0_to_f32(0)) == FP_SUBNORMAL);
  CHECK(e8m0_to_f32(127) == 1.0f);
  CHECK(e8m0_to_f32(254) == std::ldexp(1.0f, 127));
}

TEST_CASE("dequantize_row decodes MXFP4: every code under every scale byte", "[kernels]") {
  test::for_each_simd_target([&](const std::string&) {
    // 256 rows x 96 columns: row r has scale bytes r, 255 - r and (r * 7) % 256 for its three
    // groups; each row holds all 16 codes in both nibble positions, at shifting lane offsets.
    const int64_t rows = 256, cols = 96;
    std::vector<uint8_t> data(rows * cols / 2), scales(rows * cols / 32);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols / 2; ++j) data[r * cols / 2 + j] = static_cast<uint8_t>((j * 17 + r * 5) & 0xff);
      scales[r * 3 + 0] = static_cast<uint8_t>(r);
      scales[r * 3 + 1] = static_cast<uint8_t>(255 - r);
      scales[r * 3 + 2] = static_cast<uint8_t>((r * 7) & 0xff);
    }
    WeightView w;
    w.format = WeightFormat::MXFP4;
    w.rows = rows;
    w.cols = cols;
    w.data = data.data();
    w.scales = scales.data();
    std::vector<float> out(cols);
    int64_t checked = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, out.data());
      for (int64_t k = 0; k < cols; ++k) {
        const int code = (data[r * cols / 2 + k / 2] >> (4 * (k % 2))) & 0xf;
        const int s = scales[r * 3 + k / 32];
        CAPTURE(r, k, code, s);
        // The definition, in double, rounded once to float (6 * 2^127 overflows to inf).
        const double magnitude = std::ldexp(std::array<double, 8>{0, 0.5, 1, 1.5, 2, 3, 4, 6}[code & 7], s - 127);
        const float want = s == 255 ? NAN : static_cast<float>((code & 8) ? -magnitude : magnitude);
        CHECK(same_value(want, out[k]));
        CHECK(same_value(e2m1_to_f32(static_cast<uint8_t>(code)) * e8m0_to_f32(static_cast<uint8_t>(s)), out[k]));
        ++checked;
      }
    }
    CHECK(checked == rows * cols);
  });
}

TEST_CASE("dequantize_row decodes INT4_G32: every nibble under several scales", "[kernels]") {
  test::for_each_simd_target([&](const std::string&) {
    // One row per scale; 45 columns (a lone vector, a partial word and a partial group), every
    // nibble value at several offsets; padding nibbles of the last word hold garbage.
    const uint16_t scale_bits[] = {0x3f80 /* 1 */,     0xbf00 /* -0.5 */, 0x3c60 /* 0.013671875 */,
                                   0x0001 /* 2^-133 */, 0x7f7f /* max */,  0x8000 /* -0 */,
                                   0x7f80 /* inf */,    0x7fc0 /* NaN */,  0x4640 /* 12288 */};
    const int64_t rows = std::size(scale_bits), cols = 45, words = 6, groups = 2;
    std::vector<uint32_t> data(rows * words);
    std::vector<uint16_t> scales(rows * groups);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < words * 8; ++j) {
        const uint32_t u = j < cols ? static_cast<uint32_t>((j + 3 * r) % 16) : 0xfu - (j % 16);
        data[r * words + j / 8] |= u << (4 * (j % 8));
      }
      scales[r * groups + 0] = scale_bits[r];
      scales[r * groups + 1] = scale_bits[(r + 1) % rows];
    }
    WeightView w;
    w.format = WeightFormat::INT4_G32;
    w.rows = rows;
    w.cols = cols;
    w.data = data.data();
    w.scales = scales.data();
    std::vector<float> out(cols);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, out.data());
      for (int64_t k = 0; k < cols; ++k) {
        const int u = static_cast<int>((data[r * words + k / 8] >> (4 * (k % 8))) & 0xf);
        const float scale = bf16_to_f32(scales[r * groups + k / 32]);
        CAPTURE(r, k, u, scale);
        const float want = static_cast<float>(double(u - 8) * double{scale});  // exact unless it overflows
        CHECK(same_value(want, out[k]));
      }
    }
    // All 16 values appear in every row (nibble j of row r is (j + 3r) % 16 for j < 45).
    CHECK(int4_to_f32(0) == -8.0f);
    CHECK(int4_to_f32(8) == 0.0f);
    CHECK(int4_to_f32(15) == 7.0f);
  });
}

TEST_CASE("matmul_rows matches the reference on packed 4-bit formats", "[kernels]") {
  test::for_each_simd_target([&](const std::string&) {
    std::mt19937 rng(4321);
    const std::pair<int64_t, int64_t> int4_shapes[] = {{1, 7},  {7, 7},   {5, 33},  {13, 100}, {9, 3584},
                                                       {3, 40}, {11, 45}, {130, 8}, {1, 1},    {4, 601}};
    const std::pair<int64_t, int64_t> mxfp4_shapes[] = {{1, 32}, {7, 32}, {5, 64}, {130, 64}, {9, 3584}, {3, 96}};
    for (WeightFormat f : {WeightFormat::INT4_G32, WeightFormat::MXFP4}) {
      const bool int4 = f == WeightFormat::INT4_G32;
      const auto* begin = int4 ? std::begin(int4_shapes) : std::begin(mxfp4_shapes);
      const auto* end = int4 ? std::end(int4_shapes) : std::end(mxfp4_shapes);
      for (const auto* shape = begin; shape != end; ++shape) {
        const auto [rows, cols] = *shape;
        const TestMatrix m = random_matrix(f, rows, cols, rng);
        const WeightView w = m.view();
        std::vector<float> row(cols);
        bool exact = true;
        for (int64_t r = 0; r < rows; ++r) {  // dequantize_row is exact, row strides included
          dequantize_row(w, r, row.data());
          for (int64_t k = 0; k < cols; ++k) exact = exact && same_value(row[k], packed_element(m, r, k));
        }
        CAPTURE(format_name(f), rows, cols);
        CHECK(exact);
        for (int64_t n_pos : {1, 2, 3, 4, 5, 9, 16}) check_matmul_against_ref(w, n_pos, rng);
      }
    }
  });
}

TEST_CASE("matmul_rows matches matmul_rows_ref on every format and odd shapes", "[kernels]") {
  test::for_each_simd_target([&](const std::string&) {
    std::mt19937 rng(1234);
    const std::pair<int64_t, int64_t> shapes[] = {{1, 1},     {1, 7},     {7, 1},   {7, 7},    {129, 300},
                                                  {300, 129}, {576, 576}, {1, 576}, {130, 16}, {5, 33}};
    for (WeightFormat f : kFormats) {
      for (auto [rows, cols] : shapes) {
        if (f == WeightFormat::MXFP4 && cols % 32 != 0) continue;
        const TestMatrix m = random_matrix(f, rows, cols, rng);
        const WeightView w = m.view();
        for (int64_t n_pos : {1, 2, 3, 4, 5, 9}) check_matmul_against_ref(w, n_pos, rng);
      }
    }
  });
}

TEST_CASE("matmul_rows pairs every column with its own input: one-hot x gives W's columns exactly", "[kernels]") {
  // Position t of x is the unit vector e_t, so y[t, r] must equal W[r, t]: a weight decoded into
  // the wrong lane, on any vector width, shows up as a wrong value here.
  test::for_each_simd_target([&](const std::string&) {
    std::mt19937 rng(5);
    for (WeightFormat f : kFormats) {
      CAPTURE(format_name(f));
      const int64_t rows = 37, cols = f == WeightFormat::MXFP4 ? 160 : 133;
      const TestMatrix m = random_matrix(f, rows, cols, rng);
      const WeightView w = m.view();
      std::vector<float> x(cols * cols, 0.0f), y(cols * rows), row(cols);
      for (int64_t t = 0; t < cols; ++t) x[t * cols + t] = 1.0f;
      matmul_rows(w, x.data(), cols, cols, y.data(), rows, 0, rows);
      int64_t wrong = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) row[k] = weight_element_ref(w, r, k);
        for (int64_t t = 0; t < cols; ++t) wrong += !(y[t * rows + r] == row[t]);
      }
      CHECK(wrong == 0);
    }
  });
}

TEST_CASE("matmul_rows is batch invariant (bit-exact)", "[kernels]") {
  test::for_each_simd_target([&](const std::string&) {
    std::mt19937 rng(99);
    const int64_t rows = 131, n_max = 19;  // up to a verify pass (8) and prefill tiles past it
    for (WeightFormat f : kFormats) {
      CAPTURE(format_name(f));
      // cols: full chunks, a lone vector and a tail; MXFP4 takes whole 32-column groups only.
      const int64_t cols = f == WeightFormat::MXFP4 ? 608 : 601;
      const TestMatrix m = random_matrix(f, rows, cols, rng);
      const WeightView w = m.view();
      const int64_t x_stride = cols + 5;
      const auto x = random_vector(static_cast<size_t>(n_max * x_stride), rng);

      // One position at a time: the recipe every other call must reproduce.
      std::vector<float> single(n_max * rows);
      for (int64_t t = 0; t < n_max; ++t)
        matmul_rows(w, x.data() + t * x_stride, x_stride, 1, single.data() + t * rows, rows, 0, rows);

      for (int64_t n_pos = 1; n_pos <= n_max; ++n_pos) {
        CAPTURE(n_pos);
        std::vector<float> batch(n_pos * rows);
        matmul_rows(w, x.data(), x_stride, n_pos, batch.data(), rows, 0, rows);
        CHECK(same_bits(batch, std::vector<float>(single.begin(), single.begin() + n_pos * rows)));
      }

      // Compact x (another stride), split row ranges, and a thread pool.
      std::vector<float> x_compact(n_max * cols);
      for (int64_t t = 0; t < n_max; ++t)
        std::memcpy(&x_compact[t * cols], &x[t * x_stride], cols * sizeof(float));
      std::vector<float> split(n_max * rows);
      const int64_t bounds[] = {0, 1, 4, 67, 128, 129, rows};
      for (size_t i = 0; i + 1 < std::size(bounds); ++i)
        matmul_rows(w, x_compact.data(), cols, n_max, split.data(), rows, bounds[i], bounds[i + 1]);
      CHECK(same_bits(split, single));

      ThreadPool pool(3);
      std::vector<float> threaded(n_max * rows);
      pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
        matmul_rows(w, x.data(), x_stride, n_max, threaded.data(), rows, begin, end);
      });
      CHECK(same_bits(threaded, single));
    }
  });
}

TEST_CASE("vector ops match their reference twins", "[kernels]") {
  test::for_each_simd_target([&](const std::string&) {
    std::mt19937 rng(7);
    for (int64_t n : {1, 7, 8, 31, 33, 129, 300, 576, 7168}) {
      CAPTURE(n);
      const auto a = random_vector(n, rng), b = random_vector(n, rng), weight = random_vector(n, rng);

      double abs_sum = 0.0;
      for (int64_t i = 0; i < n; ++i) abs_sum += std::fabs(double{a[i]} * b[i]);
      const float d = dot(a.data(), b.data(), n), d_ref = dot_ref(a.data(), b.data(), n);
      CHECK(std::fabs(double{d} - d_ref) <= 1e-5 * abs_sum);

      std::vector<float> out(n), out_ref(n), in_place = a;
      rmsnorm(a.data(), weight.data(), n, 1e-6f, out.data());
      rmsnorm_ref(a.data(), weight.data(), n, 1e-6f, out_ref.data());
      rmsnorm(in_place.data(), weight.data(), n, 1e-6f, in_place.data());
      CHECK(same_bits(in_place, out));
      for (int64_t i = 0; i < n; ++i) CHECK(out[i] == Approx(out_ref[i]).epsilon(1e-5).margin(1e-30));

      std::vector<float> gate = a, gate_ref = a;
      silu_mul(gate.data(), b.data(), n);
      silu_mul_ref(gate_ref.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) CHECK(gate[i] == Approx(gate_ref[i]).epsilon(1e-6).margin(1e-30));

      std::vector<float> y = b, y_ref = b;
      axpy(0.37f, a.data(), y.data(), n);
      axpy_ref(0.37f, a.data(), y_ref.data(), n);
      for (int64_t i = 0; i < n; ++i)
        CHECK(std::fabs(y[i] - y_ref[i]) <= 1e-6f * (std::fabs(b[i]) + std::fabs(0.37f * a[i])));

      std::vector<float> p = a;
      for (auto& e : p) e *= 8.0f;
      std::vector<float> p_ref = p;
      softmax(p.data(), n);
      softmax_ref(p_ref.data(), n);
      double total = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        CHECK(p[i] == Approx(p_ref[i]).epsilon(1e-5).margin(1e-12));
        total += p[i];
      }
      CHECK(total == Approx(1.0).epsilon(1e-5));
    }
  });
}

TEST_CASE("silu_mul and softmax are accurate at the extremes", "[kernels]") {
  std::vector<float> gate = {-100.0f, -20.0f, 0.0f, 20.0f, 100.0f}, up(5, 2.0f);
  silu_mul(gate.data(), up.data(), 5);
  CHECK(std::fabs(gate[0]) < 1e-30f);  // exp(100) overflows to inf, as in torch: -0
  CHECK(gate[1] == Approx(-40.0 / (1.0 + std::exp(20.0))).epsilon(1e-6));
  CHECK(gate[2] == 0.0f);
  CHECK(gate[3] == Approx(40.0 / (1.0 + std::exp(-20.0))).epsilon(1e-6));
  CHECK(gate[4] == 200.0f);

  std::vector<float> logits = {1000.0f, 1000.0f, -1000.0f};
  softmax(logits.data(), 3);
  CHECK(logits[0] == 0.5f);
  CHECK(logits[1] == 0.5f);
  CHECK(logits[2] == 0.0f);
}
