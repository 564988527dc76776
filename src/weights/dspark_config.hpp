// config.json of a DSpark drafter for Kimi K3 (`model_type` k3_dspark, `architectures`
// [K3DSparkModel], as published with Inferact/Kimi-K3-DSpark): a few dense MLA layers with RoPE,
// conditioned on the target's hidden rows at `target_layer_ids`, a low-rank Markov head and a
// confidence head. Every value the drafter uses is read and checked here, against its target too.
// docs/dspark.md says what each means.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/model_config.hpp"

namespace deltafin {

struct K3Config;

struct DSparkConfig {
  std::string path;                     // the config.json it came from (for messages)
  int64_t hidden_size = 0;              // = the target's (embedding and lm_head are the target's)
  int64_t intermediate_size = 0;        // each layer's dense SiLU MLP
  int64_t num_hidden_layers = 0;
  int64_t vocab_size = 0;
  float rms_norm_eps = 1e-5f;
  std::vector<int64_t> target_layer_ids;  // 0-based target layers whose outputs condition the draft
  int64_t target_hidden_size = 0;
  int64_t mask_token_id = -1;           // fills the block's positions after the anchor
  int64_t markov_rank = 0;
  bool confidence_head = false;         // enable_confidence_head
  bool confidence_with_markov = false;  // its input is [hidden, markov embedding]
  // The layers' MLA, as a ModelConfig's attention fields (heads, LoRA ranks, head dims, RoPE):
  // the softmax scale and the YaRN frequencies come from the same code as Kimi K2's.
  ModelConfig attention;

  int64_t kv_width() const { return attention.kv_lora_rank + attention.qk_rope_head_dim; }
  uint64_t weight_bytes() const;        // the drafter's own weights as stored (BF16; F32 confidence head)
  uint64_t state_bytes_per_position() const;  // its latent cache (fp32) for one position
};

DSparkConfig load_dspark_config(const std::string& dir);
DSparkConfig parse_dspark_config(const std::string& json, const std::string& path);
// Throws (one line naming the drafter's config) when it cannot draft for this target.
void check_dspark_target(const DSparkConfig& draft, const K3Config& target);

}  // namespace deltafin
