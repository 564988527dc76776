// config.json of a Kimi K3 checkpoint: `model_type` kimi_k3 with the text model in a
// `text_config` of type kimi_linear (or a bare kimi_linear config). Every value the engine uses
// is read here and checked once; docs/kimi-k3.md says what each means.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/model_size.hpp"

namespace deltafin {

struct K3Config {
  std::string path;  // the config.json it came from (for messages)

  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;  // the context length; 0: not stated
  int64_t num_nextn_predict_layers = 0;  // multi-token-prediction layers after the last (not run)
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t intermediate_size = 0;      // dense MLP of the first layers
  int64_t first_k_dense_replace = 1;
  int64_t moe_layer_freq = 1;
  float rms_norm_eps = 1e-5f;
  int64_t attn_res_block_size = 0;    // Block Attention Residuals: seal a snapshot every N layers
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;

  // SiTU-GLU: [b tanh(g/b) sigmoid(g)] * [bl tanh(u/bl)]; linear_beta 0 = identity up branch.
  float situ_beta = 4.0f;
  float situ_linear_beta = 25.0f;

  // Kimi Delta Attention (linear attention) layers.
  std::vector<bool> is_mla;           // [layer]: true for gated MLA, false for KDA
  int64_t kda_heads = 0;
  int64_t kda_head_dim = 0;
  int64_t conv_kernel = 4;
  float gate_lower_bound = -5.0f;

  // Gated MLA without RoPE.
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool mla_output_gate = true;

  // Latent MoE.
  int64_t num_experts = 0;
  int64_t num_experts_per_token = 0;
  int64_t num_shared_experts = 0;
  int64_t moe_intermediate_size = 0;  // one routed expert's (and one shared expert's) width
  int64_t latent_size = 0;            // routed_expert_hidden_size
  bool latent_norm = true;
  bool renormalize = true;
  float routed_scaling_factor = 1.0f;
  bool mxfp4_experts = false;         // quantization_config: compressed-tensors mxfp4-pack-quantized

  bool is_moe_layer(int64_t layer) const {
    return num_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
};

K3Config load_k3_config(const std::string& path);
K3Config parse_k3_config(const std::string& json, const std::string& path);

// Bytes from config.json: BF16 spine with the F32 tensors of the release (A_log, dt_bias, conv
// weights, KDA o_norm, router bias), MXFP4 routed experts (or BF16 when unquantized).
ModelBytes k3_bytes_from_config(const K3Config& config);

}  // namespace deltafin
