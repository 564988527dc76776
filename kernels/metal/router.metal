// The sigmoid MoE router (cpu/router.cpp's route_token) per row: scores = sigmoid(logits) in
// fp32, bias added for selection only; groups scored by their two best biased scores and the best
// topk_group kept; top_k rounds of a simdgroup argmax under the CPU's order (larger first, equal
// values: lower index), a butterfly of simd_shuffle_xor whose result does not depend on the
// order of the comparisons; the chosen ids ascending, their unbiased scores summed in that
// order, renormalised, scaled. One simdgroup per row (grid x = row).
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

inline bool better(float v, int i, float best_v, int best_i) { return v > best_v || (v == best_v && i < best_i); }

// The index of the best (value, index) pair over the simdgroup, in every lane.
inline int simd_argmax(float v, int i) {
  for (ushort offset = 16; offset > 0; offset >>= 1) {
    const float ov = simd_shuffle_xor(v, offset);
    const int oi = simd_shuffle_xor(i, offset);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
  return i;
}

// logits [n, E], bias [E] (has_bias) -> ids [n, top_k], weights [n, top_k]; tg: 3 E floats.
kernel void df_route(constant RouteArgs& a [[buffer(0)]], device const float* logits [[buffer(kRouteLogits)]],
                     device const float* bias [[buffer(kRouteBias)]], device int* ids [[buffer(kRouteIds)]],
                     device float* weights [[buffer(kRouteWeights)]], threadgroup float* tg [[threadgroup(0)]],
                     uint3 group [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  const uint E = a.experts, t = group.x;
  threadgroup float* score = tg;
  threadgroup float* choice = tg + E;
  threadgroup float* state = tg + 2u * E;  // 0 blocked, 1 open, 2 chosen
  device const float* row = logits + t * a.logits.stride;
  for (uint e = lid; e < E; e += kSimdWidth) {
    score[e] = 1.0f / (1.0f + exp(-row[e]));
    choice[e] = score[e] + (a.has_bias != 0u ? bias[e] : 0.0f);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint kept = 0xffffffffu;  // groups allowed
  const uint per = E / a.n_group;
  if (a.n_group > 1u) {
    float group_score = -INFINITY;
    if (lid < a.n_group) {
      float top1 = -INFINITY, top2 = -INFINITY;
      for (uint e = lid * per; e < (lid + 1u) * per; ++e) {
        const float v = choice[e];
        if (v > top1) {
          top2 = top1;
          top1 = v;
        } else if (v > top2) {
          top2 = v;
        }
      }
      group_score = per > 1u ? top1 + top2 : top1;
    }
    kept = 0u;
    for (uint round = 0; round < a.topk_group; ++round) {
      const bool open = lid < a.n_group && ((kept >> lid) & 1u) == 0u;
      const int winner = simd_argmax(open ? group_score : -INFINITY, open ? int(lid) : 0x7fffffff);
      if (winner < int(a.n_group)) kept |= 1u << uint(winner);
    }
  }
  for (uint e = lid; e < E; e += kSimdWidth) {
    const uint g = e / per;
    state[e] = (a.n_group == 1u || (g < a.n_group && ((kept >> g) & 1u) != 0u)) ? 1.0f : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint round = 0; round < a.top_k; ++round) {
    float best_v = -INFINITY;
    int best_i = 0x7fffffff;
    for (uint e = lid; e < E; e += kSimdWidth)
      if (state[e] == 1.0f && better(choice[e], int(e), best_v, best_i)) {
        best_v = choice[e];
        best_i = int(e);
      }
    const int winner = simd_argmax(best_v, best_i);  // 0x7fffffff: nothing left (NaN logits)
    if (lid == 0u && winner < int(E)) state[winner] = 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lid != 0u) return;
  device int* id = ids + t * a.ids.stride;
  device float* w = weights + t * a.weights.stride;
  float sum = 0.0f;
  uint found = 0;
  for (uint e = 0; e < E && found < a.top_k; ++e)
    if (state[e] == 2.0f) {
      id[found] = int(e);
      sum += score[e];
      ++found;
    }
  for (uint j = 0; j < a.top_k; ++j) {
    if (j >= found) {  // NaN logits only: no expert, no weight
      id[j] = -1;
      w[j] = NAN;
      continue;
    }
    const float s = score[id[j]];
    w[j] = a.renormalize != 0u ? s / (sum + 1e-20f) * a.scaling : s * a.scaling;
  }
}
