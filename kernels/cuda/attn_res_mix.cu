// Attention-Residuals mix per row (cpu::attn_res_mix): score_i = sum_d v_i[d] / rms(v_i) * w[d]
// (block tree sums), the softmax of the scores as the CPU takes it (max, exp, sum in double in
// index order), then out[d] = sum_i p_i v_i[d] by fused multiply-add from zero, i ascending.
// One block per row.
#include <cmath>

#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256;

// candidates [n, dim] each, query [dim] -> out [n, dim].
__global__ void __launch_bounds__(kThreads) mix_kernel(const MixCandidates cand, const float* query, float eps,
                                                        const FMat out) {
  __shared__ float scratch[32];
  __shared__ float p[kMaxMixCandidates];
  const int64_t t = blockIdx.x, dim = out.cols;
  for (int i = 0; i < cand.count; ++i) {
    const float* v = cand.p[i] + t * cand.stride[i];
    float sq = 0.0f;
    for (int64_t d = threadIdx.x; d < dim; d += kThreads) sq = fmaf(v[d], v[d], sq);
    const float inv = 1.0f / sqrtf(block_sum(sq, scratch) / static_cast<float>(dim) + eps);
    float s = 0.0f;
    for (int64_t d = threadIdx.x; d < dim; d += kThreads) s = fmaf(v[d] * inv, query[d], s);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) p[i] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float top = -INFINITY;
    for (int i = 0; i < cand.count; ++i) top = fmaxf(top, p[i]);
    double total = 0.0;
    for (int i = 0; i < cand.count; ++i) total += p[i] = expf(p[i] - top);
    const float sum = static_cast<float>(total);
    for (int i = 0; i < cand.count; ++i) p[i] /= sum;
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    float acc = 0.0f;
    for (int i = 0; i < cand.count; ++i) acc = fmaf(p[i], cand.p[i][t * cand.stride[i] + d], acc);
    out.row(t)[d] = acc;
  }
}

}  // namespace

cudaError_t launch_attn_res_mix(const MixCandidates& c, const float* query, float eps, const FMat& out,
                                cudaStream_t stream) {
  if (out.rows == 0) return cudaSuccess;
  mix_kernel<<<static_cast<unsigned>(out.rows), kThreads, 0, stream>>>(c, query, eps, out);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
