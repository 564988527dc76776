// config.json of an EAGLE-3 head for Kimi K3 with DeepSeek-V3 MLA, as vLLM's
// Eagle3DeepseekV2ForCausalLM serves it (lightseekorg/kimi-k3-eagle3.1-mla): one decoder layer whose
// attention reads [embedding, hidden] (2 x hidden), MLA with YaRN RoPE, a dense SiLU MLP; fc over
// the target's rows at its aux layers. Every value the head uses is read and checked here, against
// its target too. docs/eagle3.md says what each means.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/model_config.hpp"

namespace deltafin {

struct K3Config;

struct Eagle3Config {
  std::string path;               // the config.json it came from (for messages)
  int64_t hidden_size = 0;        // = the target's (the embedding may be the target's)
  int64_t intermediate_size = 0;  // the layer's dense SiLU MLP
  int64_t vocab_size = 0;
  int64_t target_hidden_size = 0;
  float rms_norm_eps = 1e-6f;
  // vLLM's aux ids (eagle_aux_hidden_state_layer_ids, default (2, L / 2, L - 3)): the stream
  // entering target layer id, i.e. the output of 0-based layer id - 1, which target_layers holds.
  std::vector<int64_t> aux_layer_ids, target_layers;
  bool norm_before_residual = false;  // the hidden input's residual is taken after hidden_norm
  bool fc_norm = false;               // each aux row RMS-normed (fc_norm.i) before fc
  bool norm_output = false;           // the next step is fed the normed output, not the pre-norm sum
  ModelConfig attention;  // the layer's MLA (heads, LoRA ranks, head dims, RoPE) as ModelConfig fields

  int64_t kv_width() const { return attention.kv_lora_rank + attention.qk_rope_head_dim; }
  // Its own weights as stored (BF16), with an own lm_head / embedding when it has them.
  uint64_t weight_bytes(bool own_lm_head, bool own_embedding) const;
  // Per position: the latent row and the hidden half of kv_a's output (fp32).
  uint64_t state_bytes_per_position() const { return static_cast<uint64_t>(2 * kv_width()) * sizeof(float); }
};

// Throws (one line naming the head's config.json and the field) when it cannot draft for `target`.
Eagle3Config parse_eagle3_config(const std::string& json, const std::string& path, const K3Config& target);
Eagle3Config load_eagle3_config(const std::string& dir, const K3Config& target);

}  // namespace deltafin
