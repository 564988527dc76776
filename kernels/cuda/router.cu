// The sigmoid MoE router (cpu/router.cpp) per row, choosing exactly what route_token chooses:
// scores = sigmoid(logits) with the exponential taken in double and rounded (as glibc's expf
// rounds; the choices must match the CPU's, not merely come close), bias added for selection
// only; groups scored by their two best biased scores and the best topk_group kept; top_k rounds
// of a warp argmax under the CPU's order (larger value first, equal values: lower index); the
// chosen ids ascending, their unbiased scores summed in that order, renormalised, scaled.
// One warp per row, 4 rows per block; each warp's scores live in shared memory.
#include <cmath>
#include <cstdint>

#include "cuda/ops.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kRowsPerBlock = 4, kThreads = 32 * kRowsPerBlock;
constexpr int kMaxGroups = 64;
enum : uint8_t { kBlocked = 0, kOpen = 1, kChosen = 2 };

// (value, index) pairs under the CPU's order; the lane with the best pair wins everywhere.
__device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

__device__ __forceinline__ int warp_argmax(float v, int i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
  return i;
}

// logits [n, E], bias [E] or nullptr -> ids [n, top_k], weights [n, top_k].
__global__ void __launch_bounds__(kThreads) route_kernel(const RouterSpec spec, const FMat logits, const float* bias,
                                                          const Mat<int32_t> ids, const FMat weights) {
  extern __shared__ float smem[];
  const int E = static_cast<int>(spec.experts), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (t >= logits.rows) return;  // whole warps leave
  float* score = smem + warp * 2 * E;
  float* choice = score + E;
  uint8_t* state = reinterpret_cast<uint8_t*>(smem + kRowsPerBlock * 2 * E) + warp * E;

  for (int e = lane; e < E; e += 32) {
    score[e] = 1.0f / (1.0f + static_cast<float>(exp(-static_cast<double>(logits.row(t)[e]))));
    choice[e] = score[e] + (bias ? bias[e] : 0.0f);
  }
  __syncwarp();
  uint64_t kept = ~uint64_t{0};  // groups allowed
  const int per = static_cast<int>(spec.experts / spec.n_group);
  if (spec.n_group > 1) {
    float group_score[kMaxGroups / 32];
#pragma unroll
    for (int r = 0; r < kMaxGroups / 32; ++r) {
      const int g = lane + 32 * r;
      float top1 = -INFINITY, top2 = -INFINITY;
      if (g < spec.n_group)
        for (int e = g * per; e < (g + 1) * per; ++e) {
          const float v = choice[e];
          if (v > top1) top2 = top1, top1 = v;
          else if (v > top2) top2 = v;
        }
      group_score[r] = per > 1 ? top1 + top2 : top1;
    }
    kept = 0;
    for (int64_t round = 0; round < spec.topk_group; ++round) {
      float best_v = -INFINITY;
      int best_i = INT32_MAX;
#pragma unroll
      for (int r = 0; r < kMaxGroups / 32; ++r) {
        const int g = lane + 32 * r;
        if (g < spec.n_group && !(kept >> g & 1) && better(group_score[r], g, best_v, best_i))
          best_v = group_score[r], best_i = g;
      }
      kept |= uint64_t{1} << warp_argmax(best_v, best_i);
    }
  }
  for (int e = lane; e < E; e += 32) {
    const int g = e / per;
    state[e] = spec.n_group == 1 || (g < spec.n_group && (kept >> g & 1)) ? kOpen : kBlocked;
  }
  __syncwarp();
  for (int64_t round = 0; round < spec.top_k; ++round) {
    float best_v = -INFINITY;
    int best_i = INT32_MAX;
    for (int e = lane; e < E; e += 32)
      if (state[e] == kOpen && better(choice[e], e, best_v, best_i)) best_v = choice[e], best_i = e;
    const int winner = warp_argmax(best_v, best_i);  // INT32_MAX: nothing left (NaN logits)
    if (lane == 0 && winner < E) state[winner] = kChosen;
    __syncwarp();
  }
  if (lane == 0) {  // ascending ids, scores summed in that order
    int32_t* id = ids.row(t);
    float sum = 0.0f;
    int64_t found = 0;
    for (int e = 0; e < E && found < spec.top_k; ++e)
      if (state[e] == kChosen) id[found++] = e, sum += score[e];
    float* w = weights.row(t);
    for (int64_t j = 0; j < spec.top_k; ++j) {
      if (j >= found) {  // NaN logits only: no expert, no weight
        id[j] = -1, w[j] = __uint_as_float(0x7fc00000u);
        continue;
      }
      w[j] = spec.renormalize ? score[id[j]] / (sum + 1e-20f) * spec.scaling : score[id[j]] * spec.scaling;
    }
  }
}

}  // namespace

cudaError_t launch_route(const RouterSpec& spec, const FMat& logits, const float* bias, const Mat<int32_t>& ids,
                         const FMat& weights, cudaStream_t stream) {
  if (logits.rows == 0) return cudaSuccess;
  if (spec.n_group > kMaxGroups || spec.top_k > kMaxRouteTopK) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(kRowsPerBlock) * spec.experts * (2 * sizeof(float) + 1);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const unsigned blocks = static_cast<unsigned>((logits.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  route_kernel<<<blocks, kThreads, smem, stream>>>(spec, logits, bias, ids, weights);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
