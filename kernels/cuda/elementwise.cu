// Element-wise ops over strided [rows, cols] views: fill, add, mul_sigmoid, gated (SiLU, SiTU).
// Grid: x over columns (256 per block), y over rows; each element is computed on its own, so
// out may alias an input and nothing depends on the shape.
#include <algorithm>

#include "cuda/activation.cuh"
#include "cuda/ops.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxGridRows = 65535;

enum class Op { kFill, kAdd, kMulSigmoid, kGated };

template <Op O>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(const FMat a, const FMat b, const FMat out, float value,
                                                                const GatedActivation act) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= out.cols) return;
  for (int64_t r = blockIdx.y; r < out.rows; r += gridDim.y) {
    float& y = out.row(r)[c];
    if constexpr (O == Op::kFill) y = value;
    else if constexpr (O == Op::kAdd) y = a.row(r)[c] + b.row(r)[c];
    else if constexpr (O == Op::kMulSigmoid) y = a.row(r)[c] * sigmoid(b.row(r)[c]);
    else y = gated_act(act, a.row(r)[c], b.row(r)[c]);
  }
}

template <Op O>
cudaError_t launch(const FMat& a, const FMat& b, const FMat& out, float value, const GatedActivation& act,
                   cudaStream_t stream) {
  if (out.rows == 0 || out.cols == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((out.cols + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(out.rows, kMaxGridRows)));
  elementwise_kernel<O><<<grid, kThreads, 0, stream>>>(a, b, out, value, act);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fill(const FMat& out, float value, cudaStream_t stream) {
  return launch<Op::kFill>(out, out, out, value, {}, stream);
}
cudaError_t launch_add(const FMat& a, const FMat& b, const FMat& out, cudaStream_t stream) {
  return launch<Op::kAdd>(a, b, out, 0.0f, {}, stream);
}
cudaError_t launch_mul_sigmoid(const FMat& x, const FMat& gate, const FMat& out, cudaStream_t stream) {
  return launch<Op::kMulSigmoid>(x, gate, out, 0.0f, {}, stream);
}
cudaError_t launch_gated(const GatedActivation& act, const FMat& gate, const FMat& up, const FMat& out,
                         cudaStream_t stream) {
  return launch<Op::kGated>(gate, up, out, 0.0f, act, stream);
}

}  // namespace deltafin::cuda
