// Embedding lookup: out[t] = row ids[t] of the table, dequantized element by element through
// weight_at() (bit-exact with cpu::weight_element_ref). One block per row, threads over columns.
#include "cuda/dequant.cuh"
#include "cuda/ops.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256;

// ids [n, 1] -> out [n, table.cols].
__global__ void __launch_bounds__(kThreads) embed_kernel(const WMat table, const IMat ids, const FMat out) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids.row(t)[0];
  const bool valid = id >= 0 && id < table.rows;  // an id outside the table reads nothing: NaN
  for (int64_t k = threadIdx.x; k < out.cols; k += kThreads)
    out.row(t)[k] = valid ? weight_at(table, id, k) : __uint_as_float(0x7fc00000u);
}

}  // namespace

cudaError_t launch_embed(const WMat& table, const IMat& ids, const FMat& out, cudaStream_t stream) {
  if (out.rows == 0) return cudaSuccess;
  embed_kernel<<<static_cast<unsigned>(out.rows), kThreads, 0, stream>>>(table, ids, out);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
