// The routed-experts bookkeeping around the expert matmuls (matmul.cu, expert mode):
//   expert_slots    one block per expert of the union: the slots t * k + j whose id is that
//                   expert, compacted in ascending t (warp ballots and a prefix over the warps,
//                   in order), so each expert's matmuls run on exactly the rows that chose it;
//   expert_combine  one block per row: out[t] = sum of weights[t, j] * y[t * k + j] over j in
//                   ascending expert id, by fused multiply-add from zero (the CPU backend's
//                   order: fill 0, then an axpy per expert in ascending order). No atomics.
#include "cuda/ops.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxK = 64;  // ids per row (the router's top_k)

// ids [n, k], experts [count] -> lists [count, n], counts [count].
__global__ void __launch_bounds__(kThreads) expert_slots_kernel(const IMat ids, const int32_t* experts,
                                                                 int32_t* lists, int32_t* counts) {
  __shared__ int32_t warp_totals[kThreads / 32];
  const int32_t expert = experts[blockIdx.x];
  int32_t* list = lists + static_cast<int64_t>(blockIdx.x) * ids.rows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t written = 0;
  for (int64_t base = 0; base < ids.rows; base += kThreads) {
    const int64_t t = base + threadIdx.x;
    int32_t slot = -1;
    if (t < ids.rows)
      for (int64_t j = 0; j < ids.cols; ++j)
        if (ids.row(t)[j] == expert) {
          slot = static_cast<int32_t>(t * ids.cols + j);
          break;
        }
    const unsigned chose = __ballot_sync(0xffffffffu, slot >= 0);
    __syncthreads();  // the previous round's readers of warp_totals are done
    if (lane == 0) warp_totals[warp] = __popc(chose);
    __syncthreads();
    int32_t at = written + __popc(chose & ((1u << lane) - 1));
    for (int w = 0; w < warp; ++w) at += warp_totals[w];
    if (slot >= 0) list[at] = slot;
    for (int w = 0; w < kThreads / 32; ++w) written += warp_totals[w];
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = written;
}

// ids [n, k], weights [n, k], y [n * k, out.cols] -> out [n, cols].
__global__ void __launch_bounds__(kThreads) expert_combine_kernel(const IMat ids, const FMat weights, const float* y,
                                                                   const FMat out) {
  __shared__ int order[kMaxK];  // j by ascending id (stable)
  const int64_t t = blockIdx.x, k = ids.cols;
  if (threadIdx.x < k) {
    const int32_t id = ids.row(t)[threadIdx.x];
    int rank = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t other = ids.row(t)[j];
      rank += other < id || (other == id && j < threadIdx.x);
    }
    order[rank] = threadIdx.x;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < out.cols; c += kThreads) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      const int j = order[i];
      acc = fmaf(weights.row(t)[j], y[(t * k + j) * out.cols + c], acc);
    }
    out.row(t)[c] = acc;
  }
}

}  // namespace

cudaError_t launch_expert_slots(const IMat& ids, const int32_t* experts, int64_t count, int32_t* lists,
                                int32_t* counts, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  expert_slots_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(ids, experts, lists, counts);
  return cudaGetLastError();
}

cudaError_t launch_expert_combine(const IMat& ids, const FMat& weights, const float* y, const FMat& out,
                                  cudaStream_t stream) {
  if (out.rows == 0) return cudaSuccess;
  if (ids.cols > kMaxK) return cudaErrorInvalidValue;
  expert_combine_kernel<<<static_cast<unsigned>(out.rows), kThreads, 0, stream>>>(ids, weights, y, out);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
