// Bytes of a checkpoint computed from its config.json alone (for `deltafin inspect` on a
// directory holding only config.json, and to cross-check the tensors of a full one): the routed
// experts in their stored format, what one token reads of them, and the resident spine. Each
// family's config parser computes its ModelBytes (k2_bytes_from_config, k3_bytes_from_config)
// with the stored sizes below.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/weight_format.hpp"
#include "weights/pass_activations.hpp"

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
  // The spine in the order a pass first uses it (the memory plan's units, decode/memory_plan.hpp):
  // the embedding table, each layer's weights, then the head (final norm(s) and lm_head); their
  // sum is `spine`.
  uint64_t spine_embed = 0;
  std::vector<uint64_t> spine_layers;  // [num_hidden_layers]
  uint64_t spine_head = 0;
  // The activations of a pass over n positions (weights/pass_activations.hpp).
  PassActivations activations;
};

// Stored bytes of a [rows, cols] matrix in the formats checkpoints use (the table of
// cpu/weight_format.hpp).
namespace stored {
constexpr uint64_t bf16(uint64_t rows, uint64_t cols) { return stored_bytes(WeightFormat::BF16, rows, cols); }
constexpr uint64_t block_fp8(uint64_t rows, uint64_t cols) { return stored_bytes(WeightFormat::F8_E4M3_BLOCK128, rows, cols); }
constexpr uint64_t int4_g32(uint64_t rows, uint64_t cols) { return stored_bytes(WeightFormat::INT4_G32, rows, cols); }
constexpr uint64_t mxfp4(uint64_t rows, uint64_t cols) { return stored_bytes(WeightFormat::MXFP4, rows, cols); }
}  // namespace stored

}  // namespace deltafin
