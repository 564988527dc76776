// Reductions in a fixed order: a warp's xor-shuffle tree (every lane ends with the same value,
// as a + b == b + a), and block reductions that combine the warps' results in warp order. The
// order depends only on the block size, never on the data or on which block runs first, and no
// atomics are involved. Block sizes must be multiples of 32.
#pragma once

namespace deltafin::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The sum (or max) over the block, returned to every thread; scratch: 32 floats of shared memory.
template <bool kMax = false>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < warps; ++w) total = kMax ? fmaxf(total, scratch[w]) : total + scratch[w];
  return total;
}

__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_reduce<false>(v, scratch); }
__device__ __forceinline__ float block_max(float v, float* scratch) { return block_reduce<true>(v, scratch); }

}  // namespace deltafin::cuda
