// Element-wise functions shared by the kernels, in the CPU backend's fp32 form: sigmoid, SiLU
// and SiTU gating (cpu/k3_ops.hpp). Full-precision expf and tanhf (no fast math).
#pragma once

#include "op_params.hpp"

namespace deltafin::cuda {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// act(gate, up): silu(gate) * up, or [beta tanh(gate/beta) sigmoid(gate)] * [linear_beta tanh(up/linear_beta)].
__device__ __forceinline__ float gated_act(const GatedActivation& a, float gate, float up) {
  if (a.kind == GatedActivation::kSiLU) return (gate / (1.0f + expf(-gate))) * up;
  const float g = a.beta * tanhf(gate / a.beta) * (1.0f / (1.0f + expf(-gate)));
  const float u = a.linear_beta > 0.0f ? a.linear_beta * tanhf(up / a.linear_beta) : up;
  return g * u;
}

}  // namespace deltafin::cuda
