// Parameters of the backend ops that every backend and its kernels share (plain data only, so
// that CUDA and Metal host code can pass them on unchanged).
#pragma once

#include <cstdint>

namespace deltafin {

// Multi-head latent attention (see cpu/mla_attention.hpp).
struct MlaShape {
  int64_t heads = 0, nope = 0, rope = 0, v = 0, kv_lora = 0;
  float scale = 1.0f;  // softmax scale (qk_head_dim^-0.5 * mscale^2)
};

// The sigmoid MoE router of DeepSeek-V3, the Kimi K2 family and Kimi K3 (see cpu/router.hpp).
struct RouterSpec {
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool renormalize = true;
  float scaling = 1.0f;
};

// The gated activation between an MLP's gate/up and down projections.
struct GatedActivation {
  enum Kind : uint8_t { kSiLU, kSiTU } kind = kSiLU;
  float beta = 0, linear_beta = 0;  // SiTU only (see cpu/k3_ops.hpp)
};

}  // namespace deltafin
