// Interleaved RoPE in place: in row t (position start + t) and head h, pair i of the rotated
// part turns by (start + t) * inv_freq[i] (the fp32 angle, as the CPU computes it), with cos and
// sin taken in double and rounded, each times attention_factor (cpu/rope.cpp). One thread per
// pair; grid x over heads * pairs, y over rows.
#include <algorithm>

#include "cuda/ops.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 128;
constexpr unsigned kMaxGridRows = 65535;

// x [n, heads * head_dim], inv_freq [half].
__global__ void __launch_bounds__(kThreads) rope_kernel(const FMat x, int64_t heads, int64_t head_dim, int64_t offset,
                                                         const float* inv_freq, int64_t half, float factor,
                                                         int64_t start) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= heads * half) return;
  const int64_t h = idx / half, i = idx % half;
  for (int64_t t = blockIdx.y; t < x.rows; t += gridDim.y) {
    const float angle = static_cast<float>(start + t) * inv_freq[i];
    const float c = static_cast<float>(cos(static_cast<double>(angle))) * factor;
    const float s = static_cast<float>(sin(static_cast<double>(angle))) * factor;
    float* p = x.row(t) + h * head_dim + offset + 2 * i;
    const float a = p[0], b = p[1];
    p[0] = a * c - b * s;
    p[1] = b * c + a * s;
  }
}

}  // namespace

cudaError_t launch_rope(const FMat& x, int64_t heads, int64_t head_dim, int64_t offset, const float* inv_freq,
                        int64_t half, float attention_factor, int64_t start, cudaStream_t stream) {
  if (x.rows == 0 || heads * half == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((heads * half + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(x.rows, kMaxGridRows)));
  rope_kernel<<<grid, kThreads, 0, stream>>>(x, heads, head_dim, offset, inv_freq, half, attention_factor, start);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
