// Element-wise kernels: fill, strided copy, and df_binary (add, mul_sigmoid, the gated
// activations). One thread per element; grid (ceil(cols / kThreads), rows). out may alias an
// input: each thread reads its element before writing it.
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

kernel void df_fill(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(kFillOut)]],
                    threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                    uint lid [[thread_index_in_threadgroup]]) {
  const uint c = group.x * kThreads + lid, r = group.y;
  if (c >= a.out.cols) return;
  out[r * a.out.stride + c] = a.value;
}

// src and dst must not overlap (the host copies through a scratch buffer when they do).
kernel void df_copy(constant CopyArgs& a [[buffer(0)]], device const float* src [[buffer(kCopySrc)]],
                    device float* dst [[buffer(kCopyDst)]], threadgroup float* tg [[threadgroup(0)]],
                    uint3 group [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  const uint c = group.x * kThreads + lid, r = group.y;
  if (c >= a.dst.cols) return;
  dst[r * a.dst.stride + c] = src[r * a.src.stride + c];
}

kernel void df_binary(constant BinaryArgs& a [[buffer(0)]], device const float* x [[buffer(kBinaryA)]],
                      device const float* y [[buffer(kBinaryB)]], device float* out [[buffer(kBinaryOut)]],
                      threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                      uint lid [[thread_index_in_threadgroup]]) {
  const uint c = group.x * kThreads + lid, r = group.y;
  if (c >= a.out.cols) return;
  const float u = x[r * a.a.stride + c], v = y[r * a.b.stride + c];
  float result;
  if (a.op == kOpAdd) result = u + v;
  else if (a.op == kOpMulSigmoid) result = u * sigmoid(v);
  else result = gated_act(a.act, u, v);
  out[r * a.out.stride + c] = result;
}
