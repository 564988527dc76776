// Per-target decoders of one 32-column chunk of a weight row into kG vectors of fp32 (Highway;
// included once per target by matmul.cpp through foreach_target).
//
// Every decode is exact: each lane holds W[r, k] exactly as the format defines it (the scalar
// decoders in matmul.hpp), so the values fed to the FMAs never depend on the target. What does
// depend on the target is the lane ("slot") each column lands in: the cheapest unpacks work per
// 128-bit block (ZipLower, TableLookupBytes) or split a byte's two nibbles into different
// vectors. A decoder may use any order that is a fixed bijection of the chunk's 32 columns onto
// its 32 slots; chunk_order() learns it once per target and format by decoding one-hot chunks,
// and the matmul lays x out in the same order. So a decoder cannot pair a weight with the wrong
// input on one vector width and the right one on another: the pairing is derived from the
// decoder itself.
//
// Specials: a chunk with fp8 NaN codes is decoded again with its NaN lanes fixed in vectors; on
// SSSE3/SSE4, whose fp16 conversion (Highway's, in software) turns inf/NaN finite, a chunk with
// fp16 specials takes the exact scalar path. Real weights never hold them, so the cost is one
// check per chunk, and the rare path is kept out of line or call-free so that the chunk loop
// keeps its accumulators in registers.
#if defined(DELTAFIN_CHUNK_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DELTAFIN_CHUNK_DECODE_INL_H_
#undef DELTAFIN_CHUNK_DECODE_INL_H_
#else
#define DELTAFIN_CHUNK_DECODE_INL_H_
#endif

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <hwy/highway.h>

#include "cpu/matmul.hpp"

HWY_BEFORE_NAMESPACE();
namespace deltafin::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// SVE's vector length is only known at run time; its decoders use 128-bit (4-lane) vectors so
// that the chunk structure below stays a compile-time constant.
#if HWY_HAVE_SCALABLE
using DF = hn::CappedTag<float, 4>;
#else
using DF = hn::ScalableTag<float>;
#endif
using VF = hn::Vec<DF>;

constexpr int64_t kChunk = 32;                                  // columns per chunk
constexpr int64_t kN = static_cast<int64_t>(hn::MaxLanes(DF()));  // fp32 lanes: 1, 4, 8 or 16
constexpr int64_t kG = kChunk / kN;                             // vectors per chunk
static_assert(kN == 1 || kN == 4 || kN == 8 || kN == 16, "decoders assume 1, 4, 8 or 16 fp32 lanes");

// Where each of a chunk's 32 columns sits among its kG * kN decoded lanes.
struct ChunkOrder {
  std::array<int8_t, kChunk> slot_of_column;
};

// ---- Formats: chunk bytes, the exact scalar value of a column, the vector decode. ----------

// Column i of a chunk of 16-bit elements.
inline uint16_t u16_at(const uint8_t* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return v;
}

struct FormatF32 {
  static constexpr int64_t kBytes = kChunk * 4;
  static constexpr bool kScaled = false;
  static float element(const uint8_t* p, int64_t i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  static void one_hot(uint8_t* p, int64_t i) {
    const float one = 1.0f;
    std::memcpy(p + 4 * i, &one, 4);
  }
#if HWY_TARGET != HWY_SCALAR
  static void decode(const uint8_t* p, float, VF (&w)[kG]) {
    const DF df;
    for (int64_t j = 0; j < kG; ++j) w[j] = hn::LoadU(df, reinterpret_cast<const float*>(p) + j * kN);
  }
#endif
};

// bf16 -> fp32 is the bf16 bits in the high half of a u32: one zip with zero per vector.
struct FormatBF16 {
  static constexpr int64_t kBytes = kChunk * 2;
  static constexpr bool kScaled = false;
  static float element(const uint8_t* p, int64_t i) { return bf16_to_f32(u16_at(p, i)); }
  static void one_hot(uint8_t* p, int64_t i) { p[2 * i] = 0x80, p[2 * i + 1] = 0x3f; }
#if HWY_TARGET != HWY_SCALAR
  static void decode(const uint8_t* p, float, VF (&w)[kG]) {
    const DF df;
    const hn::RebindToUnsigned<DF> du32;
    const hn::Repartition<uint16_t, DF> d16;  // 2 kN lanes
    const auto* u16 = reinterpret_cast<const uint16_t*>(p);
    for (int64_t j = 0; j < kG / 2; ++j) {
      const auto v = hn::LoadU(d16, u16 + j * 2 * kN);
      w[2 * j] = hn::BitCast(df, hn::ZipLower(du32, hn::Zero(d16), v));
      w[2 * j + 1] = hn::BitCast(df, hn::ZipUpper(du32, hn::Zero(d16), v));
    }
  }
#endif
};

struct FormatF16 {
  static constexpr int64_t kBytes = kChunk * 2;
  static constexpr bool kScaled = false;
  static float element(const uint8_t* p, int64_t i) { return f16_to_f32(u16_at(p, i)); }
  static void one_hot(uint8_t* p, int64_t i) { p[2 * i] = 0x00, p[2 * i + 1] = 0x3c; }
#if HWY_TARGET != HWY_SCALAR
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX2  // no F16C: Highway converts in software
  static bool vector_has_specials(const uint8_t* p) {
    const hn::Repartition<uint16_t, DF> d16;
    const auto exponent = hn::Set(d16, 0x7c00);
    auto any = hn::Zero(d16);
    for (int64_t j = 0; j < kG / 2; ++j)
      any = hn::Or(any, hn::VecFromMask(d16, hn::Eq(hn::And(hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p) + j * 2 * kN), exponent), exponent)));
    return !hn::AllFalse(d16, hn::Ne(any, hn::Zero(d16)));
  }
#endif
  static void decode(const uint8_t* p, float, VF (&w)[kG]) {
    const DF df;
    const hn::Rebind<hwy::float16_t, DF> dh;
    for (int64_t j = 0; j < kG; ++j) w[j] = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + j * kN));
  }
#endif
};

// DeepSeek block fp8 e4m3 (scale: the 128x128 block's fp32 multiplier). With the code in the
// high byte of a u16 (a zip with zero), an arithmetic shift right by one and clearing bit 14 and
// the low byte give the fp16 (sign << 15) | ((code & 0x7f) << 7), whose value is the e4m3 value
// / 256, subnormals included; the 256 goes into the scale (a power of two: exact).
struct FormatFp8 {
  static constexpr int64_t kBytes = kChunk;
  static constexpr bool kScaled = true;
  static float element(const uint8_t* p, int64_t i) { return fp8_e4m3_to_f32(p[i]); }
  static void one_hot(uint8_t* p, int64_t i) { p[i] = 0x38; }
#if HWY_TARGET != HWY_SCALAR
  static bool vector_has_specials(const uint8_t* p) {
    const hn::CappedTag<uint8_t, kChunk> d8;
    // A NaN code has its seven low bits set: with the sign bit forced on it reads 0xff.
    const auto sign = hn::Set(d8, 0x80), nan = hn::Set(d8, 0xff);
    constexpr int64_t kStep = static_cast<int64_t>(hn::MaxLanes(d8));
    auto found = hn::Eq(hn::Or(hn::LoadU(d8, p), sign), nan);
    for (int64_t j = kStep; j < kChunk; j += kStep) found = hn::Or(found, hn::Eq(hn::Or(hn::LoadU(d8, p + j), sign), nan));
    return !hn::AllFalse(d8, found);
  }
  // kNaN: the chunk holds NaN codes. They come out of the fp16 trick as +-1.875 (bits 0x3f80),
  // a value no finite code has (the largest is 448 / 256 = 1.75), and are replaced by NaN.
  template <bool kNaN = false>
  static void decode(const uint8_t* p, float scale, VF (&w)[kG]) {
    const DF df;
    const hn::Repartition<uint16_t, DF> d16x2;          // 2 kN lanes
    const hn::Rebind<uint8_t, decltype(d16x2)> d8;      // 2 kN codes
    const hn::Repartition<uint16_t, decltype(d8)> d16;  // kN lanes
    const hn::RebindToSigned<decltype(d16)> di16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const VF s = hn::Set(df, scale * 256.0f);
    for (int64_t j = 0; j < kG / 2; ++j) {
      const auto codes = hn::LoadU(d8, p + j * 2 * kN);
      const auto halves = [&](auto high) HWY_ATTR {
        const auto bits = hn::And(hn::BitCast(d16, hn::ShiftRight<1>(hn::BitCast(di16, high))), hn::Set(d16, 0xbf80));
        VF v = hn::PromoteTo(df, hn::BitCast(dh, bits));
        if constexpr (kNaN) v = hn::IfThenElse(hn::Eq(hn::Abs(v), hn::Set(df, 1.875f)), hn::Set(df, std::numeric_limits<float>::quiet_NaN()), v);
        return hn::Mul(v, s);
      };
      w[2 * j] = halves(hn::ZipLower(d16, hn::Zero(d8), codes));
      w[2 * j + 1] = halves(hn::ZipUpper(d16, hn::Zero(d8), codes));
    }
  }
  static void decode_specials(const uint8_t* p, float scale, VF (&w)[kG]) { decode<true>(p, scale, w); }
#endif
};

// 4-bit formats: two codes a byte, column 2i in the low nibble of chunk byte i (INT4's
// little-endian int32 words give the same byte order). kValues: code -> value; kFp16High: the
// high byte of the value's fp16 (every value is an fp16 with a zero low byte).
struct Mxfp4Codes {  // OCP E2M1; code 8 is -0
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  static constexpr uint8_t kFp16High[16] = {0x00, 0x38, 0x3c, 0x3e, 0x40, 0x42, 0x44, 0x46,
                                            0x80, 0xb8, 0xbc, 0xbe, 0xc0, 0xc2, 0xc4, 0xc6};
  static constexpr uint8_t kOneCode = 2, kZeroCode = 0;
};
struct Int4Codes {  // offset binary: code - 8
  static constexpr float kValues[16] = {-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f,
                                        0.0f,  1.0f,  2.0f,  3.0f,  4.0f,  5.0f,  6.0f,  7.0f};
  static constexpr uint8_t kFp16High[16] = {0xc8, 0xc7, 0xc6, 0xc5, 0xc4, 0xc2, 0xc0, 0xbc,
                                            0x00, 0x3c, 0x40, 0x42, 0x44, 0x45, 0x46, 0x47};
  static constexpr uint8_t kOneCode = 9, kZeroCode = 8;
};

template <class Codes>
struct FormatNibble {
  static constexpr int64_t kBytes = kChunk / 2;
  static constexpr bool kScaled = true;
  static float element(const uint8_t* p, int64_t i) { return Codes::kValues[(p[i >> 1] >> (4 * (i & 1))) & 0xf]; }
  static void one_hot(uint8_t* p, int64_t i) {
    for (int64_t j = 0; j < kBytes; ++j) p[j] = static_cast<uint8_t>(Codes::kZeroCode * 0x11);
    p[i >> 1] = static_cast<uint8_t>((i & 1) ? (Codes::kOneCode << 4) | Codes::kZeroCode
                                             : (Codes::kZeroCode << 4) | Codes::kOneCode);
  }
#if HWY_TARGET != HWY_SCALAR
  static void decode(const uint8_t* p, float scale, VF (&w)[kG]) {
    const DF df;
    if constexpr (kN == 16) {
      // One byte a u32 lane; the low nibbles index a 16-entry table of the code values times
      // the scale (exact: a power of two, or a bf16 times an integer of at most 4 bits), for the
      // even columns; the high nibbles index it again for the odd ones.
      const hn::RebindToUnsigned<DF> du32;
      const auto bytes = hn::PromoteTo(du32, hn::LoadU(hn::Rebind<uint8_t, DF>(), p));
      const VF table = hn::Mul(hn::LoadU(df, Codes::kValues), hn::Set(df, scale));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
      // vpermps reads only the index's low 4 bits: the low nibble needs no mask.
      w[0] = VF{_mm512_permutexvar_ps(bytes.raw, table.raw)};
#else
      w[0] = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::And(bytes, hn::Set(du32, 0xf))));
#endif
      w[1] = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::ShiftRight<4>(bytes)));
    } else {
      // 2 kN bytes a step: each byte a u16 lane, nibbles spread to one code a byte, a byte
      // table lookup to fp16 high bytes, zips with zero to fp16, widened to fp32.
      const hn::Repartition<uint16_t, DF> d16;           // 2 kN lanes
      const hn::Rebind<uint8_t, decltype(d16)> d8;       // 2 kN packed bytes
      const hn::Repartition<uint8_t, decltype(d16)> dc;  // 4 kN codes
      const hn::Half<decltype(d16)> dh16;
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto table = hn::LoadDup128(dc, Codes::kFp16High);
      const VF s = hn::Set(df, scale);
      for (int64_t j = 0; j < kG / 4; ++j) {
        const auto bytes = hn::PromoteTo(d16, hn::LoadU(d8, p + j * 2 * kN));
        const auto codes = hn::BitCast(dc, hn::And(hn::Or(bytes, hn::ShiftLeft<4>(bytes)), hn::Set(d16, 0x0f0f)));
        const auto high = hn::TableLookupBytes(table, codes);
        const auto lo = hn::ZipLower(d16, hn::Zero(dc), high);
        const auto hi = hn::ZipUpper(d16, hn::Zero(dc), high);
        w[4 * j + 0] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(dh16, lo))), s);
        w[4 * j + 1] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(dh16, lo))), s);
        w[4 * j + 2] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(dh16, hi))), s);
        w[4 * j + 3] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(dh16, hi))), s);
      }
    }
  }
#endif
};
using FormatMxfp4 = FormatNibble<Mxfp4Codes>;
using FormatInt4 = FormatNibble<Int4Codes>;

// ---- Decoding with the order and the specials handled. -------------------------------------

// Every column's exact value, placed at its slot (the specials path and the scalar target). Not
// inlined: the rare specials path would otherwise crowd the chunk loop out of registers.
template <class Format>
HWY_NOINLINE void decode_scalar(const uint8_t* p, float scale, const ChunkOrder& order, VF (&w)[kG]) {
  HWY_ALIGN float slots[kChunk];
  for (int64_t i = 0; i < kChunk; ++i) {
    const float v = Format::element(p, i);
    slots[order.slot_of_column[i]] = Format::kScaled ? v * scale : v;
  }
  for (int64_t j = 0; j < kG; ++j) w[j] = hn::Load(DF(), slots + j * kN);
}

template <class Format>
HWY_INLINE void decode_chunk(const uint8_t* p, float scale, const ChunkOrder& order, VF (&w)[kG]) {
#if HWY_TARGET == HWY_SCALAR
  decode_scalar<Format>(p, scale, order, w);
#else
  if constexpr (requires { Format::vector_has_specials(p); }) {
    if (HWY_UNLIKELY(Format::vector_has_specials(p))) {
      if constexpr (requires { Format::decode_specials(p, scale, w); }) return Format::decode_specials(p, scale, w);
      else return decode_scalar<Format>(p, scale, order, w);
    }
  }
  Format::decode(p, scale, w);
#endif
}

// The slot order of Format's decoder on this target, learned from one-hot chunks.
template <class Format>
ChunkOrder learn_order() {
  ChunkOrder order{};
#if HWY_TARGET == HWY_SCALAR
  for (int64_t i = 0; i < kChunk; ++i) order.slot_of_column[i] = static_cast<int8_t>(i);
#else
  bool taken[kChunk] = {};
  for (int64_t i = 0; i < kChunk; ++i) {
    alignas(64) uint8_t chunk[Format::kBytes] = {};
    Format::one_hot(chunk, i);
    VF w[kG];
    Format::decode(chunk, 1.0f, w);
    HWY_ALIGN float slots[kChunk];
    for (int64_t j = 0; j < kG; ++j) hn::Store(w[j], DF(), slots + j * kN);
    int found = -1;
    for (int s = 0; s < kChunk; ++s) {
      if (slots[s] == 1.0f && found < 0) found = s;
      else if (slots[s] != 0.0f) found = -2;
    }
    if (found < 0 || taken[found]) throw std::logic_error("chunk decoder is not a permutation of its columns");
    taken[found] = true;
    order.slot_of_column[i] = static_cast<int8_t>(found);
  }
#endif
  return order;
}

template <class Format>
const ChunkOrder& chunk_order() {
  static const ChunkOrder order = learn_order<Format>();
  return order;
}

}  // namespace deltafin::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // DELTAFIN_CHUNK_DECODE_INL_H_
