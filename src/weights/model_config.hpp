// config.json of a Kimi K2-family (DeepSeek-V3 architecture) checkpoint.
// Accepts both spellings real checkpoints use: transformers v4 (`rope_scaling` + `rope_theta`)
// and v5 (`rope_parameters`); `model_type` deepseek_v3 / kimi_k2; and a nested `text_config`
// (Kimi K2.5). Every value the engine uses is read here and checked for sanity once.
#pragma once

#include <cstdint>
#include <string>

#include "weights/model_size.hpp"

namespace deltafin {

struct RopeConfig {
  float theta = 10000.0f;
  bool yarn = false;                 // rope_type "yarn"; otherwise plain RoPE
  float factor = 1.0f;
  int64_t original_max_position_embeddings = 0;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 0.0f;               // 0 = absent
  float mscale_all_dim = 0.0f;       // 0 = absent
};

struct ModelConfig {
  std::string path;                  // the config.json it came from (for messages)
  std::string model_type;            // text model_type ("kimi_k2", "deepseek_v3")
  std::string outer_model_type;      // e.g. "kimi_k25" when a text_config was nested

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;     // dense MLP width
  int64_t moe_intermediate_size = 0; // one routed expert's width
  int64_t num_hidden_layers = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;           // 0: a direct q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  float rms_norm_eps = 1e-6f;
  int64_t max_position_embeddings = 0;
  int64_t num_nextn_predict_layers = 0;  // multi-token-prediction layers after the last (not run)
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  RopeConfig rope;
  bool fp8_block_quantized = false;  // quantization_config quant_method "fp8", 128x128 blocks
  bool int4_experts = false;         // compressed-tensors pack-quantized INT4 group-32 routed experts

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // softmax scale = qk_head_dim^-0.5 * mscale^2 (YaRN's mscale lives here, not in cos/sin).
  float softmax_scale() const;
  // cos/sin magnitude ("attention_factor" of YaRN); 1.0 for the Kimi and DeepSeek configs.
  float rope_attention_factor() const;
};

// Reads and validates `path`. Throws deltafin::Error naming the file and the field.
ModelConfig load_model_config(const std::string& path);

class ConfigReader;
// The rotary settings of a config object: `rope_parameters` (v5) or `rope_scaling` + `rope_theta`
// (v4); DSpark's drafter config reads its own with it.
RopeConfig read_rope(const ConfigReader& cfg, const std::string& path);

// Parses config text (used by load_model_config and by tests/fuzzers).
ModelConfig parse_model_config(const std::string& json, const std::string& path);

// Bytes from config.json: spine in BF16 (or block-fp8 linears when quantization_config says fp8),
// routed experts in BF16, block-fp8 or INT4 group-32 (+ BF16 scales) as the config says.
ModelBytes k2_bytes_from_config(const ModelConfig& config);

}  // namespace deltafin
