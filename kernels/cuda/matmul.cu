// y = x . W^T for the six weight formats, shaped for decode (few x rows: matrix-vector).
//
// Mapping: one warp per output row r, 8 rows per block of 256 threads. A weight row is read in
// 16-byte chunks (4 to 32 elements by format); lane l takes chunks l, l + 32, l + 64, ..., so a
// warp reads 512 contiguous bytes per step. The x rows (up to kTile at once) are staged in shared
// memory one slab of 32 chunks' columns at a time, swizzled so that each lane's float4 reads are
// free of bank conflicts; each chunk is dequantized in registers once and multiplied into every
// staged x row. Columns outside whole aligned chunks (a ragged end, or a weight whose rows are not
// 16-byte aligned) are read element by element after the chunks.
//
// Order of each y[t, r] (batch invariance): per lane, its chunks ascending and each chunk's
// elements in index order by fused multiply-add from zero, then its tail columns; then the
// lanes' partial sums by the fixed xor-shuffle tree. Nothing depends on n, on the tile a row
// falls in, or on the grid. No atomics.
//
// Expert mode (routed_experts): the x rows are the slots of a compacted list (experts.cu), and
// with two weights (gate and up of one expert) a warp computes both sums of its row and writes
// act(gate, up), so an expert's MLP is two launches.
#include <algorithm>

#include "cuda/activation.cuh"
#include "cuda/chunks.cuh"
#include "cuda/dequant.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kTile = 8;  // x rows per pass over the weights

// Shared-memory position (in float4s) of quad q of slab chunk c: chunk c's quads are permuted by
// an xor of c's bits so that 8 consecutive lanes reading the same quad hit 8 distinct 16-byte
// bank groups. P = quads per chunk.
template <int P>
__device__ __forceinline__ int swizzled(int c, int q) {
  return c * P + (q ^ (((c * P) >> 3) & (P - 1)));
}

template <WeightFormat F, int NW>
__global__ void __launch_bounds__(kThreads) matmul_kernel(const MatmulArgs a) {
  constexpr int E = kChunkElems<F>, P = E / 4, kSlab = 32 * E;  // slab: columns of 32 chunks
  extern __shared__ float4 staged[];                                // [min(kTile, n), kSlab] swizzled
  __shared__ const float* x_rows[kTile];
  __shared__ float* y_rows[kTile];

  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const bool has_row = r < a.w[0].rows;
  const int64_t cols = a.w[0].cols;
  const int64_t whole = vector_ok(a.w[0]) && (NW == 1 || vector_ok(a.w[1])) ? cols / E : 0;  // chunks read as vectors
  const int64_t slabs = (whole + 31) / 32;
  const int64_t count = a.count ? *a.count : a.n;
  const uint8_t* w_row[NW];
#pragma unroll
  for (int v = 0; v < NW; ++v) w_row[v] = a.w[v].data + (has_row ? r : 0) * row_bytes(a.w[v]);

  for (int64_t first = 0; first < count; first += kTile) {
    const int m = count - first < kTile ? static_cast<int>(count - first) : kTile;
    __syncthreads();  // the previous tile is done with x_rows, y_rows and the slab
    if (threadIdx.x < m) {
      const int64_t slot = a.slots ? a.slots[first + threadIdx.x] : first + threadIdx.x;
      x_rows[threadIdx.x] = a.in.row(a.in_by_slot ? slot : slot / a.k);
      y_rows[threadIdx.x] = a.out.row(a.out_by_slot ? slot : slot / a.k);
    }
    __syncthreads();
    float acc[NW][kTile];
#pragma unroll
    for (int v = 0; v < NW; ++v)
#pragma unroll
      for (int i = 0; i < kTile; ++i) acc[v][i] = 0.0f;

    for (int64_t s = 0; s < slabs; ++s) {
      const int64_t c = s * 32 + lane;  // this lane's chunk
      const bool mine = has_row && c < whole;
      uint4 raw[NW];
      float scale[NW];
#pragma unroll
      for (int v = 0; v < NW; ++v) {  // issued before staging, so the load overlaps it
        raw[v] = mine ? *reinterpret_cast<const uint4*>(w_row[v] + c * 16) : make_uint4(0, 0, 0, 0);
        scale[v] = mine ? chunk_scale<F>(a.w[v], r, c) : 0.0f;
      }
      __syncthreads();  // readers of the previous slab are done
      float* slab = reinterpret_cast<float*>(staged);
      for (int idx = threadIdx.x; idx < m * kSlab; idx += kThreads) {
        const int i = idx / kSlab, col = idx % kSlab;
        const int64_t k = s * kSlab + col;
        slab[i * kSlab + 4 * swizzled<P>(col / E, (col % E) / 4) + col % 4] = k < cols ? x_rows[i][k] : 0.0f;
      }
      __syncthreads();
      if (mine) {
#pragma unroll
        for (int v = 0; v < NW; ++v)
#pragma unroll
          for (int q = 0; q < P; ++q) {
            const float4 w = decode_quad<F>(raw[v], q, scale[v]);
#pragma unroll
            for (int i = 0; i < kTile; ++i) {
              if (i >= m) break;
              const float4 x = staged[i * (kSlab / 4) + swizzled<P>(lane, q)];
              acc[v][i] = fmaf(w.x, x.x, acc[v][i]);
              acc[v][i] = fmaf(w.y, x.y, acc[v][i]);
              acc[v][i] = fmaf(w.z, x.z, acc[v][i]);
              acc[v][i] = fmaf(w.w, x.w, acc[v][i]);
            }
          }
      }
    }
    if (has_row) {
      for (int64_t k = whole * E + lane; k < cols; k += 32)  // the columns outside whole chunks
#pragma unroll
        for (int v = 0; v < NW; ++v) {
          const float w = weight_at<F>(a.w[v], r, k);
#pragma unroll
          for (int i = 0; i < kTile; ++i)
            if (i < m) acc[v][i] = fmaf(w, x_rows[i][k], acc[v][i]);
        }
#pragma unroll
      for (int i = 0; i < kTile; ++i) {
        if (i >= m) break;
        const float y0 = warp_sum(acc[0][i]);
        const float y = NW == 1 ? y0 : gated_act(a.act, y0, warp_sum(acc[NW - 1][i]));
        if (lane == 0) y_rows[i][r] = y;
      }
    }
  }
}

template <WeightFormat F>
cudaError_t launch(const MatmulArgs& a, cudaStream_t stream) {
  constexpr int E = kChunkElems<F>;
  const dim3 grid(static_cast<unsigned>((a.w[0].rows + kWarps - 1) / kWarps));
  const size_t smem = static_cast<size_t>(std::min<int64_t>(kTile, a.n)) * 32 * E * sizeof(float);
  if (a.nw == 2) matmul_kernel<F, 2><<<grid, kThreads, smem, stream>>>(a);
  else matmul_kernel<F, 1><<<grid, kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_matmul(const MatmulArgs& a, cudaStream_t stream) {
  if (a.w[0].rows == 0 || a.n == 0) return cudaSuccess;
  switch (a.w[0].format) {
    case WeightFormat::F32: return launch<WeightFormat::F32>(a, stream);
    case WeightFormat::F16: return launch<WeightFormat::F16>(a, stream);
    case WeightFormat::BF16: return launch<WeightFormat::BF16>(a, stream);
    case WeightFormat::F8_E4M3_BLOCK128: return launch<WeightFormat::F8_E4M3_BLOCK128>(a, stream);
    case WeightFormat::MXFP4: return launch<WeightFormat::MXFP4>(a, stream);
    case WeightFormat::INT4_G32: return launch<WeightFormat::INT4_G32>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deltafin::cuda
