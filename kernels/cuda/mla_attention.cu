// Absorbed multi-head latent attention (cpu/mla_attention.hpp) for n causal queries. One block
// of 256 threads per (head, query); query t at position start + t attends to cache rows
// [0, start + t]. Per block:
//   q_lat[c] = sum_d q_nope[d] W_UK[d, c]         thread per column c, d ascending
//   scores   warp per position (lanes over columns, xor tree), (q_lat.c_j + q_pe.pe_j) * scale
//   softmax  online over fixed tiles of kCtxTile positions from position 0: running max, the
//            tile's exp sum by the block tree, o_lat[c] = o_lat[c] * rescale + sum_j p_j c_j[c]
//            (thread per column, j ascending)
//   out[i]   = sum_c W_UV[i, c] o_lat[c] / sum     warp per output, lanes over columns
// Every order depends only on the shape and the query's position, so a query gives the same
// bits in any batch.
#include <cmath>

#include "cuda/dequant.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kCtxTile = 256;  // positions per softmax tile

// q [n, heads * (nope + rope)], cache_c [ctx, kv_lora], cache_pe [ctx, rope] -> out [n, heads * v].
__global__ void __launch_bounds__(kThreads) mla_kernel(const MlaShape s, const WMat kv_b, const FMat q,
                                                        const FMat cache_c, const FMat cache_pe, int64_t start,
                                                        const FMat out) {
  extern __shared__ float smem[];
  float* q_nope = smem;                  // [nope]
  float* q_pe = q_nope + s.nope;         // [rope]
  float* q_lat = q_pe + s.rope;          // [kv_lora]
  float* o_lat = q_lat + s.kv_lora;      // [kv_lora]
  float* p = o_lat + s.kv_lora;          // [kCtxTile] scores, then their exps
  float* scratch = p + kCtxTile;         // [32]
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t L = s.kv_lora, ctx = start + t + 1;
  const int64_t uk_row = h * (s.nope + s.v), uv_row = uk_row + s.nope;

  const float* qh = q.row(t) + h * (s.nope + s.rope);
  for (int64_t i = threadIdx.x; i < s.nope + s.rope; i += kThreads) q_nope[i] = qh[i];  // q_pe follows q_nope
  __syncthreads();
  for (int64_t c = threadIdx.x; c < L; c += kThreads) {
    float acc = 0.0f;
    for (int64_t d = 0; d < s.nope; ++d) acc = fmaf(q_nope[d], weight_at(kv_b, uk_row + d, c), acc);
    q_lat[c] = acc;
    o_lat[c] = 0.0f;
  }
  __syncthreads();

  float running_max = -INFINITY, sum = 0.0f;
  for (int64_t j0 = 0; j0 < ctx; j0 += kCtxTile) {
    const int64_t len = ctx - j0 < kCtxTile ? ctx - j0 : kCtxTile;
    for (int64_t jj = warp; jj < len; jj += kWarps) {
      const float* cj = cache_c.row(j0 + jj);
      const float* pej = cache_pe.row(j0 + jj);
      float dot_c = 0.0f, dot_pe = 0.0f;
      for (int64_t c = lane; c < L; c += 32) dot_c = fmaf(q_lat[c], cj[c], dot_c);
      for (int64_t c = lane; c < s.rope; c += 32) dot_pe = fmaf(q_pe[c], pej[c], dot_pe);
      const float score = (warp_sum(dot_c) + warp_sum(dot_pe)) * s.scale;
      if (lane == 0) p[jj] = score;
    }
    __syncthreads();
    const float tile_max = block_max(threadIdx.x < len ? p[threadIdx.x] : -INFINITY, scratch);
    const float new_max = fmaxf(running_max, tile_max);
    const float rescale = expf(running_max - new_max);
    const float e = threadIdx.x < len ? expf(p[threadIdx.x] - new_max) : 0.0f;
    const float tile_sum = block_sum(e, scratch);  // its barriers also end every read of p above
    if (threadIdx.x < len) p[threadIdx.x] = e;
    sum = sum * rescale + tile_sum;
    running_max = new_max;
    __syncthreads();
    for (int64_t c = threadIdx.x; c < L; c += kThreads) {
      float acc = o_lat[c] * rescale;
      for (int64_t jj = 0; jj < len; ++jj) acc = fmaf(p[jj], cache_c.row(j0 + jj)[c], acc);
      o_lat[c] = acc;
    }
    __syncthreads();
  }
  for (int64_t c = threadIdx.x; c < L; c += kThreads) o_lat[c] = o_lat[c] / sum;
  __syncthreads();
  for (int64_t i = warp; i < s.v; i += kWarps) {
    float acc = 0.0f;
    for (int64_t c = lane; c < L; c += 32) acc = fmaf(weight_at(kv_b, uv_row + i, c), o_lat[c], acc);
    acc = warp_sum(acc);
    if (lane == 0) out.row(t)[h * s.v + i] = acc;
  }
}

}  // namespace

cudaError_t launch_mla_attention(const MlaShape& s, const WMat& kv_b, const FMat& q, const FMat& cache_c,
                                 const FMat& cache_pe, int64_t start, const FMat& out, cudaStream_t stream) {
  if (q.rows == 0 || s.heads == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(s.nope + s.rope + 2 * s.kv_lora + kCtxTile + 32) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(mla_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>(s.heads), static_cast<unsigned>(q.rows));
  mla_kernel<<<grid, kThreads, smem, stream>>>(s, kv_b, q, cache_c, cache_pe, start, out);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
