// The routed-experts bookkeeping around df_matmul's expert mode:
//   df_expert_slots    per expert of the union (grid x), the slots t * k + j whose id is that
//                      expert, in ascending t, so that each expert's matmuls run on exactly the
//                      rows that chose it. Lane 0 scans (n * k is small next to the matmuls).
//   df_expert_combine  out[t] = sum over j in ascending ids[t, j] of weights[t, j] * y[t * k + j]
//                      by fma from zero (the CPU backend's order: an axpy per expert, ascending).
//                      No atomics; one thread per output element.
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

// ids [n, k], experts [count] -> lists [count, n], counts [count].
kernel void df_expert_slots(constant ExpertSlotsArgs& a [[buffer(0)]], device const int* ids [[buffer(kSlotsIds)]],
                            device const int* experts [[buffer(kSlotsExperts)]], device int* lists [[buffer(kSlotsLists)]],
                            device int* counts [[buffer(kSlotsCounts)]], threadgroup float* tg [[threadgroup(0)]],
                            uint3 group [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  if (lid != 0u) return;
  const int expert = experts[group.x];
  device int* list = lists + group.x * a.ids.rows;
  int written = 0;
  for (uint t = 0; t < a.ids.rows; ++t)
    for (uint j = 0; j < a.ids.cols; ++j)
      if (ids[t * a.ids.stride + j] == expert) {
        list[written] = int(t * a.ids.cols + j);
        ++written;
        break;
      }
  counts[group.x] = written;
}

// ids [n, k], weights [n, k], y [n * k, cols] -> out [n, cols]; tg: kMaxTopK uints (j by rank).
kernel void df_expert_combine(constant CombineArgs& a [[buffer(0)]], device const int* ids [[buffer(kCombineIds)]],
                              device const float* weights [[buffer(kCombineWeights)]],
                              device const float* y [[buffer(kCombineY)]], device float* out [[buffer(kCombineOut)]],
                              threadgroup uint* order [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                              uint lid [[thread_index_in_threadgroup]]) {
  const uint t = group.y, k = a.ids.cols;
  device const int* row = ids + t * a.ids.stride;
  if (lid < k) {  // the rank of j among the row's ids (stable)
    const int id = row[lid];
    uint rank = 0;
    for (uint j = 0; j < k; ++j) rank += (row[j] < id || (row[j] == id && j < lid)) ? 1u : 0u;
    order[rank] = lid;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const uint c = group.x * kThreads + lid;
  if (c >= a.out.cols) return;
  float acc = 0.0f;
  for (uint i = 0; i < k; ++i) {
    const uint j = order[i];
    acc = fma(weights[t * a.weights.stride + j], y[(t * k + j) * a.out.cols + c], acc);
  }
  out[t * a.out.stride + c] = acc;
}
