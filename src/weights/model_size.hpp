// Bytes of a checkpoint computed from its config.json alone (for `deltafin inspect` on a
// directory holding only config.json, and to cross-check the tensors of a full one): the routed
// experts in their stored format, what one token reads of them, and the resident spine.
#pragma once

#include <cstdint>

#include "weights/k3_config.hpp"
#include "weights/model_config.hpp"

namespace deltafin {

struct ModelBytes {
  uint64_t routed = 0;            // every routed expert of every layer
  uint64_t routed_per_token = 0;  // top-k experts of every MoE layer
  uint64_t spine = 0;             // everything else (embeddings, attention, dense, shared, routers, norms)
  uint64_t parameters = 0;        // all parameters (logical weights, not bytes)
  // Session state, in float32 as the engine keeps it: the latent cache [layers][kv_lora + rope]
  // a position adds, and the fixed recurrent state (K3's KDA states and convolution windows).
  uint64_t kv_per_position = 0;
  uint64_t recurrent_state = 0;
};

// K2 family: spine in BF16 (or block-fp8 linears when quantization_config says fp8), routed
// experts in BF16, block-fp8 or INT4 group-32 (+ BF16 scales) as the config says.
ModelBytes k2_bytes_from_config(const ModelConfig& config);

// Kimi K3: BF16 spine with the F32 tensors of the release (A_log, dt_bias, conv weights, KDA
// o_norm, router bias), MXFP4 routed experts (or BF16 when unquantized).
ModelBytes k3_bytes_from_config(const K3Config& config);

}  // namespace deltafin
