// Fast dequantizing matmul for the CPU backend (Highway, static dispatch for the build's -march).
//
// Batch invariance: every y[t, r] is computed by one fixed recipe that depends only on W.cols —
// two vector accumulators fed alternate full vectors of k, any last full vector into the first,
// their sum reduced across lanes, then the scalar tail k in index order (std::fma). Tiles of
// several rows and positions only share loads; they never change that recipe, so the result is
// bit-identical whatever n_pos, the strides or the row range are.
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include <hwy/highway.h>

#include "cpu/matmul.hpp"

namespace deltafin::cpu {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// One row of W, decoded on the fly: vec(k) gives columns [k, k + lanes), at(k) column k. Every
// decode is exact, so the values fed to the FMAs never depend on which path decoded them.
struct RowF32 {
  const float* w;
  VF vec(DF df, int64_t k) const { return hn::LoadU(df, w + k); }
  float at(int64_t k) const { return w[k]; }
};

struct RowBF16 {
  const uint16_t* w;
  VF vec(DF df, int64_t k) const {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<uint32_t, DF> du32;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, w + k))));
  }
  float at(int64_t k) const { return bf16_to_f32(w[k]); }
};

struct RowF16 {
  const uint16_t* w;
  VF vec(DF df, int64_t k) const {
    const hn::Rebind<hwy::float16_t, DF> df16;
    return hn::PromoteTo(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(w + k)));
  }
  float at(int64_t k) const { return f16_to_f32(w[k]); }
};

// fp8 e4m3 -> fp32 via fp16: with the code in the high byte of a u16, an arithmetic shift right
// by one and clearing bit 14 give the fp16 (sign << 15) | ((code & 0x7f) << 7), whose value is the
// e4m3 value / 256 (subnormals included), so the fp16 conversion decodes it exactly; the 256 is
// folded into the block scale (exact: a power of two). Codes 0x7f/0xff get an all-ones fp16
// exponent, i.e. NaN. (Only hardware fp16 conversion (F16C, NEON) keeps fp16 inf/NaN; Highway's
// software fallback in builds without F16C turns them finite, here and for F16 weights.)
// A vector never straddles a 128-column scale block: k is a multiple of the lanes decoded at
// once, which divide 128.
template <class D16>
HWY_INLINE hn::Vec<D16> fp8_to_f16_bits(D16 d16, hn::Vec<D16> codes) {
  const hn::RebindToSigned<D16> di16;
  const auto high = hn::ShiftLeft<8>(codes);
  const auto sign_extended = hn::BitCast(d16, hn::ShiftRight<1>(hn::BitCast(di16, high)));
  const auto bits = hn::And(sign_extended, hn::Set(d16, 0xbf80));
  const auto magnitude = hn::And(high, hn::Set(d16, 0x7f00));
  const auto is_nan = hn::VecFromMask(d16, hn::Eq(magnitude, hn::Set(d16, 0x7f00)));
  return hn::Or(bits, hn::And(is_nan, hn::Set(d16, 0x7c00)));
}

struct RowFp8 {
  const uint8_t* w;
  const float* scales;  // this row's block-row of W.scales: [ceil(cols/128)]
  const float* table;   // fp8 code -> fp32, for the scalar tail

  VF vec(DF df, int64_t k) const {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<hwy::float16_t, DF> df16;
    const auto codes = hn::PromoteTo(du16, hn::LoadU(hn::Rebind<uint8_t, DF>(), w + k));
    const auto bits = fp8_to_f16_bits(du16, codes);
    return hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, bits)), hn::Set(df, scales[k >> 7] * 256.0f));
  }
  float at(int64_t k) const { return table[w[k]] * scales[k >> 7]; }
};

// 4-bit formats (MXFP4, INT4_G32): two codes a byte, column 2j in the low nibble of row byte j
// (INT4's little-endian int32 words give the same byte order). Every E2M1 value and every int in
// [-8, 7] is an fp16 whose low byte is zero, so a 16-entry byte table (one TableLookupBytes) turns
// each code into the high byte of its fp16, which widens to fp32 exactly; times the group's fp32
// scale that is one correctly rounded product of the same two values the reference multiplies.
// A vector never straddles a 32-column scale group: k is a multiple of the lanes decoded at once,
// which divide 32 (at most 16 fp32 lanes).
// E8M0 byte -> fp32 (e8m0_to_f32 for all 256; a load is cheaper than building the bits each time).
constexpr std::array<float, 256> kE8m0 = [] {
  std::array<float, 256> t{};
  for (int s = 0; s < 256; ++s) t[s] = e8m0_to_f32(static_cast<uint8_t>(s));
  return t;
}();

struct Mxfp4Codes {
  using Scale = uint8_t;  // E8M0
  alignas(16) static constexpr uint8_t kFp16High[16] = {0x00, 0x38, 0x3c, 0x3e, 0x40, 0x42, 0x44, 0x46,
                                                        0x80, 0xb8, 0xbc, 0xbe, 0xc0, 0xc2, 0xc4, 0xc6};
  static float value(uint8_t code) { return e2m1_to_f32(code); }
  static float scale(Scale s) { return kE8m0[s]; }
};

struct Int4Codes {
  using Scale = uint16_t;  // bf16
  alignas(16) static constexpr uint8_t kFp16High[16] = {0xc8, 0xc7, 0xc6, 0xc5, 0xc4, 0xc2, 0xc0, 0xbc,
                                                        0x00, 0x3c, 0x40, 0x42, 0x44, 0x45, 0x46, 0x47};
  static float value(uint8_t code) { return int4_to_f32(code); }
  static float scale(Scale s) { return bf16_to_f32(s); }
};

#if HWY_TARGET != HWY_SCALAR
static_assert(HWY_HAVE_SCALABLE || HWY_MAX_BYTES <= 64, "4-bit decode assumes 2 vectors of fp32 fit a 32-column group");

// The fp16 high bytes of `codes` (one code 0..15 a byte lane), via the table replicated per 128 bits.
template <class Codes, class D8>
HWY_INLINE hn::Vec<D8> nibble_fp16_high(D8 d8, hn::Vec<D8> codes) {
  if constexpr (hn::MaxLanes(D8()) >= 16) {
    return hn::TableLookupBytes(hn::LoadDup128(d8, Codes::kFp16High), codes);
  } else {
    return hn::TableLookupBytes(hn::LoadU(hn::Full128<uint8_t>(), Codes::kFp16High), codes);
  }
}

// Packed bytes (one u16 lane each) -> their two codes as bytes, low nibble first: column order.
template <class D16>
HWY_INLINE hn::Vec<D16> spread_nibbles(D16 d16, hn::Vec<D16> bytes) {
  return hn::And(hn::Or(bytes, hn::ShiftLeft<4>(bytes)), hn::Set(d16, 0x0f0f));
}
#endif

template <class Codes>
struct RowNibble {
  const uint8_t* w;                     // this row's packed bytes
  const typename Codes::Scale* scales;  // this row's group scales: [ceil(cols/32)]

  VF vec(DF df, int64_t k) const {
#if HWY_TARGET == HWY_SCALAR
    return hn::Set(df, at(k));
#else
    const hn::Half<hn::Rebind<uint8_t, DF>> dh8;     // lanes/2 packed bytes
    const hn::Half<hn::Rebind<uint16_t, DF>> dh16;
    const hn::Repartition<uint8_t, decltype(dh16)> d8;  // lanes codes
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<hwy::float16_t, DF> df16;
    const auto bytes = hn::PromoteTo(dh16, hn::LoadU(dh8, w + (k >> 1)));
    const auto high = nibble_fp16_high<Codes>(d8, hn::BitCast(d8, spread_nibbles(dh16, bytes)));
    const auto bits = hn::ShiftLeft<8>(hn::PromoteTo(d16, high));
    return hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, bits)), hn::Set(df, Codes::scale(scales[k >> 5])));
#endif
  }
  float at(int64_t k) const {
    const auto code = static_cast<uint8_t>((w[k >> 1] >> (4 * (k & 1))) & 0xf);
    return Codes::value(code) * Codes::scale(scales[k >> 5]);
  }
};

// Columns [k, k + 2 lanes) of a row as two vectors; fp8 overloads it with a double-width decode.
template <class Row>
HWY_INLINE void vec2(const Row& row, DF df, int64_t k, VF& w0, VF& w1) {
  w0 = row.vec(df, k);
  w1 = row.vec(df, k + static_cast<int64_t>(hn::Lanes(df)));
}

HWY_INLINE void vec2(const RowFp8& row, DF df, int64_t k, VF& w0, VF& w1) {
#if HWY_TARGET == HWY_SCALAR
  w0 = row.vec(df, k);
  w1 = row.vec(df, k + 1);
#else
  const hn::Repartition<uint16_t, DF> d16;
  const hn::Half<decltype(d16)> dh;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto codes = hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, decltype(d16)>(), row.w + k));
  const auto bits = fp8_to_f16_bits(d16, codes);
  const VF scale = hn::Set(df, row.scales[k >> 7] * 256.0f);
  w0 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::LowerHalf(dh, bits))), scale);
  w1 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::UpperHalf(dh, bits))), scale);
#endif
}

#if HWY_TARGET == HWY_SCALAR
template <class Codes>
HWY_INLINE void vec2(const RowNibble<Codes>& row, DF df, int64_t k, VF& w0, VF& w1) {
  w0 = row.vec(df, k);
  w1 = row.vec(df, k + 1);
}
#else
// 2 lanes of columns from `packed` (lanes bytes), all in one scale group.
template <class Codes>
HWY_INLINE void nibble_vec2(const uint8_t* packed, DF df, VF scale, VF& w0, VF& w1) {
  const hn::Rebind<uint8_t, DF> d8;                      // lanes packed bytes
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Repartition<uint8_t, decltype(d16)> d8x2;  // 2 lanes codes
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto bytes = hn::PromoteTo(d16, hn::LoadU(d8, packed));
  const auto high = nibble_fp16_high<Codes>(d8x2, hn::BitCast(d8x2, spread_nibbles(d16, bytes)));
  const auto zero = hn::Zero(d8x2);
  w0 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::ZipLower(d16, zero, high))), scale);
  w1 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::ZipUpper(d16, zero, high))), scale);
}

template <class Codes>
HWY_INLINE void vec2(const RowNibble<Codes>& row, DF df, int64_t k, VF& w0, VF& w1) {
  nibble_vec2<Codes>(row.w + (k >> 1), df, hn::Set(df, Codes::scale(row.scales[k >> 5])), w0, w1);
}

// Columns [k, k + 4 lanes): the same four vectors as two vec2 calls, decoding the group scale once
// where 4 lanes fit one group (8 fp32 lanes or fewer). AVX2 decodes the 16 bytes in one 256-bit
// pass: the byte ops work per 128-bit block, so the zips hold columns 0..7 | 16..23 and 8..15 | 24..31.
template <class Codes>
HWY_INLINE void vec4(const RowNibble<Codes>& row, DF df, int64_t k, VF& w0, VF& w1, VF& w2, VF& w3) {
  constexpr int64_t n = static_cast<int64_t>(hn::MaxLanes(DF()));
  const VF scale0 = hn::Set(df, Codes::scale(row.scales[k >> 5]));
  const VF scale1 = 4 * n <= 32 ? scale0 : hn::Set(df, Codes::scale(row.scales[(k + 2 * n) >> 5]));
#if HWY_TARGET == HWY_AVX2
  const hn::Full128<uint8_t> d8;
  const hn::Full256<uint16_t> d16;
  const hn::Full256<uint8_t> d8x2;
  const hn::Full128<uint16_t> dh16;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto bytes = hn::PromoteTo(d16, hn::LoadU(d8, row.w + (k >> 1)));
  const auto codes = hn::BitCast(d8x2, spread_nibbles(d16, bytes));
  const auto high = hn::TableLookupBytes(hn::LoadDup128(d8x2, Codes::kFp16High), codes);
  const auto zero = hn::Zero(d8x2);
  const auto lo = hn::ZipLower(d16, zero, high);  // cols 0..7 | 16..23
  const auto hi = hn::ZipUpper(d16, zero, high);  // cols 8..15 | 24..31
  w0 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::LowerHalf(dh16, lo))), scale0);
  w1 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::LowerHalf(dh16, hi))), scale0);
  w2 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::UpperHalf(dh16, lo))), scale1);
  w3 = hn::Mul(hn::PromoteTo(df, hn::BitCast(df16, hn::UpperHalf(dh16, hi))), scale1);
#else
  nibble_vec2<Codes>(row.w + (k >> 1), df, scale0, w0, w1);
  nibble_vec2<Codes>(row.w + (k >> 1) + n, df, scale1, w2, w3);
#endif
}
#endif

// Whether a row decoder has vec4 (then dot_tile takes 4 vectors a step; the recipe is unchanged).
template <class Row>
constexpr bool kHasVec4 = requires(const Row& row, DF df, VF& w) { vec4(row, df, int64_t{0}, w, w, w, w); };

const float* fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) t[code] = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    return t;
  }();
  return table.data();
}

// Row access per format.
struct LayoutF32 {
  const WeightView& wv;
  RowF32 row(int64_t r) const { return {static_cast<const float*>(wv.data) + r * wv.cols}; }
};
struct LayoutBF16 {
  const WeightView& wv;
  RowBF16 row(int64_t r) const { return {static_cast<const uint16_t*>(wv.data) + r * wv.cols}; }
};
struct LayoutF16 {
  const WeightView& wv;
  RowF16 row(int64_t r) const { return {static_cast<const uint16_t*>(wv.data) + r * wv.cols}; }
};
struct LayoutFp8 {
  const WeightView& wv;
  const float* table = fp8_table();
  RowFp8 row(int64_t r) const {
    const auto* data = static_cast<const uint8_t*>(wv.data);
    return {data + r * wv.cols, static_cast<const float*>(wv.scales) + (r >> 7) * wv.scale_cols(), table};
  }
};

template <class Codes>
struct LayoutNibble {
  const WeightView& wv;
  const int64_t row_bytes = wv.packed_row_bytes();
  const int64_t groups = wv.group_cols();
  RowNibble<Codes> row(int64_t r) const {
    return {static_cast<const uint8_t*>(wv.data) + r * row_bytes,
            static_cast<const typename Codes::Scale*>(wv.scales) + r * groups};
  }
};

// y[p][i] = dot(row r0 + i, x_p) for an R x P tile, by the one recipe described at the top.
template <int R, int P, class Layout>
HWY_INLINE void dot_tile(const Layout& layout, int64_t r0, const float* const (&xs)[P], int64_t cols,
                         float* const (&ys)[P]) {
  const DF df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  decltype(layout.row(0)) rows[R];
  HWY_UNROLL(4) for (int i = 0; i < R; ++i) rows[i] = layout.row(r0 + i);

  VF acc0[R][P], acc1[R][P];
  HWY_UNROLL(4) for (int i = 0; i < R; ++i) {
    HWY_UNROLL(4) for (int p = 0; p < P; ++p) acc0[i][p] = acc1[i][p] = hn::Zero(df);
  }

  int64_t k = 0;
  if constexpr (kHasVec4<std::remove_reference_t<decltype(rows[0])>>) {  // two steps of the loop below at once
    for (; k + 4 * n <= cols; k += 4 * n) {
      VF x0[P], x1[P], x2[P], x3[P];
      HWY_UNROLL(4) for (int p = 0; p < P; ++p) {
        x0[p] = hn::LoadU(df, xs[p] + k);
        x1[p] = hn::LoadU(df, xs[p] + k + n);
        x2[p] = hn::LoadU(df, xs[p] + k + 2 * n);
        x3[p] = hn::LoadU(df, xs[p] + k + 3 * n);
      }
      HWY_UNROLL(4) for (int i = 0; i < R; ++i) {
        VF w0, w1, w2, w3;
        vec4(rows[i], df, k, w0, w1, w2, w3);
        HWY_UNROLL(4) for (int p = 0; p < P; ++p) {
          acc0[i][p] = hn::MulAdd(w0, x0[p], acc0[i][p]);
          acc1[i][p] = hn::MulAdd(w1, x1[p], acc1[i][p]);
          acc0[i][p] = hn::MulAdd(w2, x2[p], acc0[i][p]);
          acc1[i][p] = hn::MulAdd(w3, x3[p], acc1[i][p]);
        }
      }
    }
  }
  for (; k + 2 * n <= cols; k += 2 * n) {
    VF x0[P], x1[P];
    HWY_UNROLL(4) for (int p = 0; p < P; ++p) {
      x0[p] = hn::LoadU(df, xs[p] + k);
      x1[p] = hn::LoadU(df, xs[p] + k + n);
    }
    HWY_UNROLL(4) for (int i = 0; i < R; ++i) {
      VF w0, w1;
      vec2(rows[i], df, k, w0, w1);
      HWY_UNROLL(4) for (int p = 0; p < P; ++p) {
        acc0[i][p] = hn::MulAdd(w0, x0[p], acc0[i][p]);
        acc1[i][p] = hn::MulAdd(w1, x1[p], acc1[i][p]);
      }
    }
  }
  if (k + n <= cols) {
    HWY_UNROLL(4) for (int i = 0; i < R; ++i) {
      const VF w0 = rows[i].vec(df, k);
      HWY_UNROLL(4) for (int p = 0; p < P; ++p) {
        acc0[i][p] = hn::MulAdd(w0, hn::LoadU(df, xs[p] + k), acc0[i][p]);
      }
    }
    k += n;
  }

  HWY_UNROLL(4) for (int i = 0; i < R; ++i) {
    HWY_UNROLL(4) for (int p = 0; p < P; ++p) {
      float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[i][p], acc1[i][p])));
      for (int64_t j = k; j < cols; ++j) sum = std::fma(rows[i].at(j), xs[p][j], sum);
      ys[p][r0 + i] = sum;
    }
  }
}

// Rows [row_begin, row_end) for positions [t0, t0 + P): tiles of R rows, then single rows.
template <int R, int P, class Layout>
void tile_rows(const Layout& layout, const float* x, int64_t x_stride, int64_t t0, float* y,
               int64_t y_stride, int64_t row_begin, int64_t row_end) {
  const float* xs[P];
  float* ys[P];
  for (int p = 0; p < P; ++p) {
    xs[p] = x + (t0 + p) * x_stride;
    ys[p] = y + (t0 + p) * y_stride;
  }
  const int64_t cols = layout.wv.cols;
  int64_t r = row_begin;
  for (; r + R <= row_end; r += R) dot_tile<R, P>(layout, r, xs, cols, ys);
  for (; r < row_end; ++r) dot_tile<1, P>(layout, r, xs, cols, ys);
}

// Walks row blocks small enough to stay in cache while every group of positions passes over them:
// groups of 4 positions (one row at a time), then a tail group of 3, 2 (two rows) or 1 (four rows).
template <class Layout>
void matmul_layout(const Layout& layout, int64_t row_bytes, const float* x, int64_t x_stride,
                   int64_t n_pos, float* y, int64_t y_stride, int64_t row_begin, int64_t row_end) {
  constexpr int64_t kBlockBytes = 128 * 1024;
  const int64_t block_rows =
      n_pos <= 1 ? row_end - row_begin : std::max<int64_t>(4, kBlockBytes / row_bytes);
  for (int64_t rb = row_begin; rb < row_end; rb += block_rows) {
    const int64_t re = std::min(row_end, rb + block_rows);
    int64_t t = 0;
    for (; t + 4 <= n_pos; t += 4) tile_rows<1, 4>(layout, x, x_stride, t, y, y_stride, rb, re);
    switch (n_pos - t) {
      case 3: tile_rows<1, 3>(layout, x, x_stride, t, y, y_stride, rb, re); break;
      case 2: tile_rows<2, 2>(layout, x, x_stride, t, y, y_stride, rb, re); break;
      case 1: tile_rows<4, 1>(layout, x, x_stride, t, y, y_stride, rb, re); break;
      default: break;
    }
  }
}

template <class Layout>
void dequantize_layout(const Layout& layout, int64_t r, float* out) {
  const DF df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  const auto row = layout.row(r);
  const int64_t cols = layout.wv.cols;
  int64_t k = 0;
  for (; k + n <= cols; k += n) hn::StoreU(row.vec(df, k), df, out + k);
  for (; k < cols; ++k) out[k] = row.at(k);
}

}  // namespace

void matmul_rows(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y,
                 int64_t y_stride, int64_t row_begin, int64_t row_end) {
  if (n_pos <= 0 || row_begin >= row_end) return;
  const int64_t cols = std::max<int64_t>(w.cols, 1);  // for the row-block size only
  switch (w.format) {
    case WeightFormat::F32:
      return matmul_layout(LayoutF32{w}, 4 * cols, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::F16:
      return matmul_layout(LayoutF16{w}, 2 * cols, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::BF16:
      return matmul_layout(LayoutBF16{w}, 2 * cols, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::F8_E4M3_BLOCK128:
      return matmul_layout(LayoutFp8{w}, cols, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::MXFP4:
      return matmul_layout(LayoutNibble<Mxfp4Codes>{w}, cols / 2 + cols / 32 + 1, x, x_stride, n_pos, y, y_stride,
                           row_begin, row_end);
    case WeightFormat::INT4_G32:
      return matmul_layout(LayoutNibble<Int4Codes>{w}, cols / 2 + cols / 16 + 1, x, x_stride, n_pos, y, y_stride,
                           row_begin, row_end);
  }
}

void dequantize_row(const WeightView& w, int64_t r, float* out) {
  switch (w.format) {
    case WeightFormat::F32: return dequantize_layout(LayoutF32{w}, r, out);
    case WeightFormat::F16: return dequantize_layout(LayoutF16{w}, r, out);
    case WeightFormat::BF16: return dequantize_layout(LayoutBF16{w}, r, out);
    case WeightFormat::F8_E4M3_BLOCK128: return dequantize_layout(LayoutFp8{w}, r, out);
    case WeightFormat::MXFP4: return dequantize_layout(LayoutNibble<Mxfp4Codes>{w}, r, out);
    case WeightFormat::INT4_G32: return dequantize_layout(LayoutNibble<Int4Codes>{w}, r, out);
  }
}

}  // namespace deltafin::cpu
