// Fast dequantizing matmul for the CPU backend, compiled for every SIMD target and dispatched at
// run time (simd_target.hpp). Weights are decoded 32 columns (one chunk) at a time by the
// decoders of chunk_decode-inl.h; x is first laid out in the decoder's slot order, chunk by
// chunk and zero-padded to whole chunks, so every weight meets its own input.
//
// Batch invariance: y[t, r] is computed by one recipe that depends only on W.cols and the target:
// kAcc vector accumulators, decoded vector j of the row going into accumulator j % kAcc, in chunk
// order (the last, partial chunk with its missing columns masked to zero), then the accumulators
// summed and reduced across lanes. Tiles of several rows and positions share a chunk's decode and
// the x loads; they never change that recipe, so the result is bit-identical whatever n_pos, the
// strides, the row range or the thread count. A pass of up to kMaxP positions is one tile, so a
// speculative verify pass (k + 1 <= 8 positions) decodes each weight once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/chunk_decode-inl.h"
#include "cpu/matmul.hpp"

HWY_BEFORE_NAMESPACE();
namespace deltafin::cpu::HWY_NAMESPACE {
namespace {

constexpr int kAcc = kN == 16 ? 2 : 1;  // accumulators per (row, position): 32 registers allow 2
constexpr int kMaxP = 8;                // positions of a pass that shares one decode
constexpr int kPrefillP = 4;            // positions of a longer pass's tile (of two rows)

// The fp32 scale of every chunk of row r, in out[0, chunks) (fp8: its 128-column block's).
// Scaled formats only; converted once per row and tile, so the chunk loop broadcasts it from memory.
template <class Format>
void row_chunk_scales(const WeightView& w, int64_t r, int64_t chunks, float* out) {
  if constexpr (std::is_same_v<Format, FormatFp8>) {
    const float* s = static_cast<const float*>(w.scales) + (r >> 7) * w.scale_cols();
    for (int64_t c = 0; c < chunks; ++c) out[c] = s[c >> 2];
  } else if constexpr (std::is_same_v<Format, FormatMxfp4>) {
    const uint8_t* s = static_cast<const uint8_t*>(w.scales) + r * w.group_cols();
    for (int64_t c = 0; c < chunks; ++c) out[c] = e8m0_to_f32(s[c]);
  } else if constexpr (std::is_same_v<Format, FormatInt4>) {
    const uint16_t* s = static_cast<const uint16_t*>(w.scales) + r * w.group_cols();
    for (int64_t c = 0; c < chunks; ++c) out[c] = bf16_to_f32(s[c]);
  }
}

// One matmul_rows call's view of W and of x in slot order.
template <class Format>
struct Problem {
  const WeightView& w;
  const ChunkOrder& order = chunk_order<Format>();
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  int64_t row_bytes = 0;    // bytes of one stored row
  int64_t chunks = 0;       // chunks per row, the partial one included
  int64_t full_chunks = 0;  // chunks with all 32 columns present
  const float* xp = nullptr;  // [n_pos, chunks * 32]: x in slot order, zero-padded
  int64_t xp_stride = 0;
  HWY_ALIGN uint32_t tail_mask[kChunk] = {};  // slot of a present column of the partial chunk: ~0

  // Decodes the partial chunk c of a row (bytes `row`, chunk scale `scale`), missing columns zero.
  HWY_NOINLINE void decode_partial(const uint8_t* row, float scale, int64_t c, VF (&out)[kG]) const {
    alignas(64) uint8_t chunk[Format::kBytes] = {};
    std::memcpy(chunk, row + c * Format::kBytes, static_cast<size_t>(row_bytes - c * Format::kBytes));
    decode_chunk<Format>(chunk, scale, order, out);
    const hn::RebindToUnsigned<DF> du;
    for (int64_t j = 0; j < kG; ++j)
      out[j] = hn::And(out[j], hn::BitCast(DF(), hn::Load(du, tail_mask + j * kN)));
  }
};

template <class Format>
int64_t stored_row_bytes(const WeightView& w) {
  if constexpr (std::is_same_v<Format, FormatMxfp4> || std::is_same_v<Format, FormatInt4>)
    return w.packed_row_bytes();
  else
    return w.cols * (Format::kBytes / kChunk);
}

template <class Format>
void init_problem(Problem<Format>& m) {
  const int64_t cols = m.w.cols;
  m.row_bytes = stored_row_bytes<Format>(m.w);
  m.chunks = (cols + kChunk - 1) / kChunk;
  m.full_chunks = cols / kChunk;
  for (int64_t i = 0; i < cols - m.full_chunks * kChunk; ++i) m.tail_mask[m.order.slot_of_column[i]] = ~0u;
}

// x [n_pos, cols] (row stride x_stride) -> xp [n_pos, chunks * 32] in slot order.
template <class Format>
void lay_out_inputs(Problem<Format>& m, const float* x, int64_t x_stride, int64_t n_pos) {
  thread_local std::vector<float> scratch;
  const int64_t cols = m.w.cols;
  m.xp_stride = m.chunks * kChunk;
  scratch.assign(static_cast<size_t>(n_pos * m.xp_stride), 0.0f);
  for (int64_t t = 0; t < n_pos; ++t) {
    const float* xt = x + t * x_stride;
    float* out = scratch.data() + t * m.xp_stride;
    for (int64_t c = 0; c < m.chunks; ++c) {
      const int64_t n = std::min<int64_t>(kChunk, cols - c * kChunk);
      for (int64_t i = 0; i < n; ++i) out[c * kChunk + m.order.slot_of_column[i]] = xt[c * kChunk + i];
    }
  }
  m.xp = scratch.data();
}

// y[t][r] for rows [r0, r0 + R) and positions [t0, t0 + P), by the recipe at the top.
template <int R, int P, class Format>
HWY_INLINE void dot_tile(const Problem<Format>& m, int64_t r0, int64_t t0, float* y, int64_t y_stride) {
  const DF df;
  VF acc[R][P][kAcc];
  const uint8_t* rows[R];
  thread_local std::vector<float> scale_buffer;
  const float* scales[R];  // [R][chunks]
  if constexpr (Format::kScaled) scale_buffer.resize(static_cast<size_t>(R * m.chunks));
  for (int i = 0; i < R; ++i) {
    rows[i] = m.data + (r0 + i) * m.row_bytes;
    if constexpr (Format::kScaled) {
      row_chunk_scales<Format>(m.w, r0 + i, m.chunks, scale_buffer.data() + i * m.chunks);
      scales[i] = scale_buffer.data() + i * m.chunks;
    }
    for (int p = 0; p < P; ++p)
      for (int a = 0; a < kAcc; ++a) acc[i][p][a] = hn::Zero(df);
  }
  const auto scale_of = [&](int i, int64_t c) HWY_ATTR {
    if constexpr (Format::kScaled) return scales[i][c];
    else return 1.0f;
  };
  const auto accumulate = [&](int i, int64_t c, const VF (&w)[kG]) HWY_ATTR {
    for (int p = 0; p < P; ++p) {
      const float* xc = m.xp + (t0 + p) * m.xp_stride + c * kChunk;
      for (int64_t j = 0; j < kG; ++j) acc[i][p][j % kAcc] = hn::MulAdd(w[j], hn::LoadU(df, xc + j * kN), acc[i][p][j % kAcc]);
    }
  };
  // Rows of 4-bit and fp8 weights are short streams that the hardware prefetcher starts late:
  // the rows two tiles ahead are prefetched (Zen 4, one thread: MXFP4 7.3 -> 9.9 GB/s, fp8
  // 8.1 -> 10.1; no gain for 16-bit formats).
  const int64_t prefetch_ahead = 2 * R * m.row_bytes;
  for (int64_t c = 0; c < m.full_chunks; ++c) {
    for (int i = 0; i < R; ++i) {
      VF w[kG];
      if constexpr (Format::kBytes <= 32) hwy::Prefetch(rows[i] + prefetch_ahead + c * Format::kBytes);
      decode_chunk<Format>(rows[i] + c * Format::kBytes, scale_of(i, c), m.order, w);
      accumulate(i, c, w);
    }
  }
  if (m.full_chunks < m.chunks) {
    for (int i = 0; i < R; ++i) {
      VF w[kG];
      m.decode_partial(rows[i], scale_of(i, m.full_chunks), m.full_chunks, w);
      accumulate(i, m.full_chunks, w);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int p = 0; p < P; ++p) {
      VF sum = acc[i][p][0];
      for (int a = 1; a < kAcc; ++a) sum = hn::Add(sum, acc[i][p][a]);
      y[(t0 + p) * y_stride + r0 + i] = hn::GetLane(hn::SumOfLanes(df, sum));
    }
  }
}

// Rows [rb, re) for positions [t0, t0 + P): tiles of R rows, then single rows.
template <int R, int P, class Format>
void tile_rows(const Problem<Format>& m, int64_t t0, float* y, int64_t y_stride, int64_t rb, int64_t re) {
  int64_t r = rb;
  for (; r + R <= re; r += R) dot_tile<R, P>(m, r, t0, y, y_stride);
  for (; r < re; ++r) dot_tile<1, P>(m, r, t0, y, y_stride);
}

// A pass of up to kMaxP positions (decode, speculative verify) is one tile: each chunk is
// decoded once (one position: four rows a tile, two: two). Longer passes (prefill) go in tiles
// of two rows and kPrefillP positions, which reuse each x load for two rows (MXFP4, 64
// positions, Zen 4: 47 -> 68 GFLOP/s against tiles of one row and 8 positions), walking row
// blocks small enough to stay in cache between tiles; the rest is one tile.
template <class Format>
void matmul_format(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y,
                   int64_t y_stride, int64_t row_begin, int64_t row_end) {
  Problem<Format> m{w};
  init_problem(m);
  lay_out_inputs(m, x, x_stride, n_pos);
  constexpr int64_t kBlockBytes = 128 * 1024;
  const int64_t block_rows =
      n_pos <= kMaxP ? row_end - row_begin : std::max<int64_t>(4, kBlockBytes / std::max<int64_t>(1, m.row_bytes));
  for (int64_t rb = row_begin; rb < row_end; rb += block_rows) {
    const int64_t re = std::min(row_end, rb + block_rows);
    int64_t t = 0;
    if (n_pos > kMaxP)
      for (; t + kPrefillP <= n_pos; t += kPrefillP) tile_rows<2, kPrefillP>(m, t, y, y_stride, rb, re);
    switch (n_pos - t) {
      case 1: tile_rows<4, 1>(m, t, y, y_stride, rb, re); break;
      case 2: tile_rows<2, 2>(m, t, y, y_stride, rb, re); break;
      case 3: tile_rows<1, 3>(m, t, y, y_stride, rb, re); break;
      case 4: tile_rows<1, 4>(m, t, y, y_stride, rb, re); break;
      case 5: tile_rows<1, 5>(m, t, y, y_stride, rb, re); break;
      case 6: tile_rows<1, 6>(m, t, y, y_stride, rb, re); break;
      case 7: tile_rows<1, 7>(m, t, y, y_stride, rb, re); break;
      case 8: tile_rows<1, 8>(m, t, y, y_stride, rb, re); break;
      default: break;
    }
  }
}

template <class Format>
void dequantize_format(const WeightView& w, int64_t r, float* out) {
  Problem<Format> m{w};
  init_problem(m);
  HWY_ALIGN float slots[kChunk];
  std::vector<float> scales(static_cast<size_t>(m.chunks), 1.0f);
  row_chunk_scales<Format>(w, r, m.chunks, scales.data());
  const uint8_t* row = m.data + r * m.row_bytes;
  for (int64_t c = 0; c < m.chunks; ++c) {
    VF v[kG];
    if (c < m.full_chunks) decode_chunk<Format>(row + c * Format::kBytes, scales[c], m.order, v);
    else m.decode_partial(row, scales[c], c, v);
    for (int64_t j = 0; j < kG; ++j) hn::Store(v[j], DF(), slots + j * kN);
    const int64_t n = std::min<int64_t>(kChunk, w.cols - c * kChunk);
    for (int64_t i = 0; i < n; ++i) out[c * kChunk + i] = slots[m.order.slot_of_column[i]];
  }
}

}  // namespace

void MatmulRows(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y, int64_t y_stride,
                int64_t row_begin, int64_t row_end) {
  switch (w.format) {
    case WeightFormat::F32: return matmul_format<FormatF32>(w, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::F16: return matmul_format<FormatF16>(w, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::BF16: return matmul_format<FormatBF16>(w, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::F8_E4M3_BLOCK128:
      return matmul_format<FormatFp8>(w, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::MXFP4: return matmul_format<FormatMxfp4>(w, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
    case WeightFormat::INT4_G32: return matmul_format<FormatInt4>(w, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
  }
}

void DequantizeRow(const WeightView& w, int64_t r, float* out) {
  switch (w.format) {
    case WeightFormat::F32: return dequantize_format<FormatF32>(w, r, out);
    case WeightFormat::F16: return dequantize_format<FormatF16>(w, r, out);
    case WeightFormat::BF16: return dequantize_format<FormatBF16>(w, r, out);
    case WeightFormat::F8_E4M3_BLOCK128: return dequantize_format<FormatFp8>(w, r, out);
    case WeightFormat::MXFP4: return dequantize_format<FormatMxfp4>(w, r, out);
    case WeightFormat::INT4_G32: return dequantize_format<FormatInt4>(w, r, out);
  }
}

}  // namespace deltafin::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::cpu {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(DequantizeRow);

void matmul_rows(const WeightView& w, const float* x, int64_t x_stride, int64_t n_pos, float* y,
                 int64_t y_stride, int64_t row_begin, int64_t row_end) {
  if (n_pos <= 0 || row_begin >= row_end) return;
  HWY_DYNAMIC_DISPATCH(MatmulRows)(w, x, x_stride, n_pos, y, y_stride, row_begin, row_end);
}

void dequantize_row(const WeightView& w, int64_t r, float* out) { HWY_DYNAMIC_DISPATCH(DequantizeRow)(w, r, out); }

}  // namespace deltafin::cpu
#endif  // HWY_ONCE
