// RMSNorm per row: out = x * (1 / sqrt(sum(x^2) / cols + eps)) * weight. One block per row; each
// thread sums the squares of columns tid, tid + 256, ... in order, then the fixed block tree
// (reduce.cuh). Every thread reads its columns before any is written, so out may alias x.
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256;

// x [n, cols], weight [cols] -> out [n, cols].
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const FMat x, const float* weight, float eps, const FMat out) {
  __shared__ float scratch[32];
  const float* xr = x.row(blockIdx.x);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < x.cols; i += kThreads) sum = fmaf(xr[i], xr[i], sum);
  const float inv = 1.0f / sqrtf(block_sum(sum, scratch) / static_cast<float>(x.cols) + eps);
  float* o = out.row(blockIdx.x);
  for (int64_t i = threadIdx.x; i < x.cols; i += kThreads) o[i] = (xr[i] * inv) * weight[i];
}

}  // namespace

cudaError_t launch_rmsnorm(const FMat& x, const float* weight, float eps, const FMat& out, cudaStream_t stream) {
  if (x.rows == 0) return cudaSuccess;
  rmsnorm_kernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(x, weight, eps, out);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
