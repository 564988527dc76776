// Activations as int8 digit planes, the input the MXFP4 tensor-core expert kernel
// (expert_mxfp4_mma.cu) multiplies. Row r of x [rows, cols] whose largest magnitude is below 2^E
// becomes the integers X = rint(x * 2^(27 - E)) (|X| <= 2^27; the rounding, at most 2^(E - 28)
// an element, is the only approximation on that path), split into four balanced base-128 digits
//   X = d0 2^21 + d1 2^14 + d2 2^7 + d3,   each d in [-64, 64],
// so that every product with a weight 2 e2m1 in [-12, 12] and every 32-term sum is exact in int32.
//   digits [rows, cols / 32, 4, 32] int8: for group g and plane p, the digits of columns
//          32 g .. 32 g + 31 in column order;
//   factor [rows]: 2^(E - 28) (2^(E - 27) undoes the scaling, 1/2 the doubled e2m1); 0 for an
//          all-zero row, NaN for a row holding a NaN or an infinity (its sums are then NaN,
//          non-finite where the CPU's are).
// One block per row, the max by the fixed-order block reduction: a row's planes depend on
// nothing but the row.
#include <cmath>

#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) digit_planes_kernel(const FMat x, int8_t* digits, float* factor) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, cols = x.cols;
  const float* row = x.row(r);
  float top = 0.0f, bad = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float v = row[c];
    if (isfinite(v)) top = fmaxf(top, fabsf(v));
    else bad = 1.0f;
  }
  top = block_reduce<true>(top, scratch);
  bad = block_reduce<true>(bad, scratch);
  int e = 0;
  if (top > 0.0f) frexpf(top, &e);  // top < 2^e
  int8_t* out = digits + r * 4 * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    int32_t v = bad == 0.0f ? __float2int_rn(ldexpf(row[c], 27 - e)) : 0;
    const int32_t d3 = ((v + 64) & 127) - 64;
    v = (v - d3) >> 7;
    const int32_t d2 = ((v + 64) & 127) - 64;
    v = (v - d2) >> 7;
    const int32_t d1 = ((v + 64) & 127) - 64;
    v = (v - d1) >> 7;
    int8_t* at = out + (c / 32) * 128 + c % 32;
    at[0] = static_cast<int8_t>(v), at[32] = static_cast<int8_t>(d1);
    at[64] = static_cast<int8_t>(d2), at[96] = static_cast<int8_t>(d3);
  }
  if (threadIdx.x == 0) factor[r] = bad != 0.0f ? NAN : top == 0.0f ? 0.0f : ldexpf(1.0f, e - 28);
}

}  // namespace

cudaError_t launch_digit_planes(const FMat& x, int8_t* digits, float* factor, cudaStream_t stream) {
  if (x.rows == 0) return cudaSuccess;
  if (x.cols % 32 != 0) return cudaErrorInvalidValue;
  digit_planes_kernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(x, digits, factor);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
