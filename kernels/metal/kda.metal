// Kimi Delta Attention over n tokens (Backend::kda, cpu/k3_ops.hpp), in two kernels:
//   df_kda_conv   one thread per channel of q, k and v: the causal depthwise convolution over the
//                 carried window and the new inputs (taps ascending, fma), SiLU, into conv
//                 [3, n, ch]; then the window updated to the last taps - 1 inputs.
//   df_kda_delta  one threadgroup per head, thread j owning value column j of the head's state
//                 S [K, V], updated in place in the state tensor (no threadgroup copy: a
//                 128 x 128 state would not fit Apple's 32 KiB). Per token: q and k
//                 l2-normalised (tg_sum), beta and the decays prepared, then the CPU's column
//                 recurrence: S[c, j] *= alpha[c], du += k[c] S[c, j] (c ascending);
//                 du = beta (v[j] - du); S[c, j] += k[c] du, o += q[c] S[c, j] (c ascending).
// A token's result depends only on the state it finds, so n tokens in one op equal n one-token
// ops bit for bit.
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

// Grid (ceil(3 ch / kThreads)).
kernel void df_kda_conv(constant KdaArgs& a [[buffer(0)]], device const float* q [[buffer(kConvQ)]],
                        device const float* k [[buffer(kConvK)]], device const float* v [[buffer(kConvV)]],
                        device const float* conv_q [[buffer(kConvWeightQ)]], device const float* conv_k [[buffer(kConvWeightK)]],
                        device const float* conv_v [[buffer(kConvWeightV)]], device float* window [[buffer(kConvWindow)]],
                        device float* conv [[buffer(kConvOut)]], threadgroup float* tg [[threadgroup(0)]],
                        uint3 group [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  const uint ch = a.heads * a.head_dim, hist = a.taps - 1u, n = a.n;
  const uint idx = group.x * kThreads + lid;
  if (idx >= 3u * ch) return;
  const uint which = idx / ch, c = idx % ch;  // q, k or v; channel
  device const float* u = which == 0u ? q : which == 1u ? k : v;
  const uint u_stride = which == 0u ? a.q.stride : which == 1u ? a.k.stride : a.v.stride;
  device const float* w = (which == 0u ? conv_q : which == 1u ? conv_k : conv_v) + c * a.taps;
  device float* win = window + which * hist * a.window.stride + c;  // [hist] oldest first
  device float* y = conv + which * n * ch + c;
  for (uint t = 0; t < n; ++t) {
    float acc = 0.0f;
    for (uint j = 0; j < a.taps; ++j) {
      const int src = int(t) - int(hist) + int(j);  // < 0: from the carried window
      const float x = src >= 0 ? u[uint(src) * u_stride + c] : win[uint(int(hist) + src) * a.window.stride];
      acc = fma(w[j], x, acc);
    }
    y[t * ch] = acc / (1.0f + exp(-acc));
  }
  // The last hist inputs; in place in ascending order, as entry i reads entry n + i > i.
  for (uint i = 0; i < hist; ++i) {
    const int src = int(n) - int(hist) + int(i);
    win[i * a.window.stride] = src >= 0 ? u[uint(src) * u_stride + c] : win[uint(int(hist) + src) * a.window.stride];
  }
}

// Grid (heads); ceil(head_dim / 32) * 32 threads; tg: 3 head_dim + kSimdWidth floats.
kernel void df_kda_delta(constant KdaArgs& a [[buffer(0)]], device const float* beta [[buffer(kDeltaBeta)]],
                         device const float* decay [[buffer(kDeltaDecay)]], device const float* dt_bias [[buffer(kDeltaDtBias)]],
                         device const float* decay_rate [[buffer(kDeltaRate)]], device float* state [[buffer(kDeltaState)]],
                         device float* out [[buffer(kDeltaOut)]], device const float* conv [[buffer(kDeltaConv)]],
                         threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                         uint lid [[thread_index_in_threadgroup]]) {
  const uint K = a.head_dim, V = a.head_dim, ch = a.heads * a.head_dim, n = a.n, h = group.x, j = lid;
  const uint simdgroups = (K + kSimdWidth - 1u) / kSimdWidth;
  threadgroup float* qs = tg;         // [K]
  threadgroup float* ks = qs + K;     // [K]
  threadgroup float* alpha = ks + K;  // [K]
  threadgroup float* scratch = alpha + K;
  const float q_scale = 1.0f / sqrt(float(K));
  device const float* qc = conv + h * K;
  device const float* kc = conv + n * ch + h * K;
  device const float* vc = conv + 2u * n * ch + h * V;
  const float rate = decay_rate[h];
  device float* S = state + h * K * a.state.stride + j;  // column j: S[c] at c * stride

  for (uint t = 0; t < n; ++t) {
    const float qv = j < K ? qc[t * ch + j] : 0.0f, kv = j < K ? kc[t * ch + j] : 0.0f;
    const float q_inv = q_scale / sqrt(tg_sum(qv * qv, scratch, lid, simdgroups) + a.norm_eps);
    const float k_inv = 1.0f / sqrt(tg_sum(kv * kv, scratch, lid, simdgroups) + a.norm_eps);
    if (j < K) {
      qs[j] = qv * q_inv;
      ks[j] = kv * k_inv;
      alpha[j] = exp(a.gate_lower_bound * sigmoid(rate * (decay[t * a.decay.stride + h * K + j] + dt_bias[h * K + j])));
    }
    const float b = sigmoid(beta[t * a.beta.stride + h]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (j < V) {
      float du = 0.0f;
      for (uint c = 0; c < K; ++c) {
        const float s = S[c * a.state.stride] * alpha[c];
        S[c * a.state.stride] = s;
        du = fma(ks[c], s, du);
      }
      du = b * (vc[t * ch + j] - du);
      float o = 0.0f;
      for (uint c = 0; c < K; ++c) {
        const float s = fma(ks[c], du, S[c * a.state.stride]);
        S[c * a.state.stride] = s;
        o = fma(qs[c], s, o);
      }
      out[t * a.out.stride + h * V + j] = o;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // q, k and alpha are rewritten for the next token
  }
}
