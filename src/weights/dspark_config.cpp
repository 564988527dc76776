// Parsing and validation of a K3 DSpark drafter's config.json (see dspark_config.hpp).
#include "weights/dspark_config.hpp"

#include <algorithm>

#include "util/input_file.hpp"
#include "weights/config_reader.hpp"
#include "weights/k3_config.hpp"

namespace deltafin {
namespace {

void positive(const std::string& path, const char* name, int64_t value) {
  if (value <= 0) fail("{}: field '{}' must be positive (got {})", path, name, value);
}

}  // namespace

DSparkConfig parse_dspark_config(const std::string& json, const std::string& path) {
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", path, simdjson::error_message(err));
  object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) fail("{}: top level must be a JSON object", path);
  const ConfigReader cfg(top, path);
  const std::string type = cfg.string("model_type", "");
  if (type != "k3_dspark") fail("{}: model_type '{}' is not a K3 DSpark drafter (expected k3_dspark)", path, type);

  DSparkConfig c;
  c.path = path;
  c.hidden_size = cfg.integer("hidden_size");
  c.intermediate_size = cfg.integer("intermediate_size");
  c.num_hidden_layers = cfg.integer("num_hidden_layers");
  c.vocab_size = cfg.integer("vocab_size");
  c.rms_norm_eps = cfg.number("rms_norm_eps", 1e-5f);
  c.target_layer_ids = cfg.integers("target_layer_ids");
  c.target_hidden_size = cfg.integer("target_hidden_size", c.hidden_size);
  c.mask_token_id = cfg.integer("mask_token_id");
  c.markov_rank = cfg.integer("markov_rank");
  c.confidence_head = cfg.boolean("enable_confidence_head", false);
  c.confidence_with_markov = cfg.boolean("confidence_head_with_markov", false);
  for (const char* name : {"hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size", "markov_rank"})
    positive(path, name, cfg.integer(name));
  if (c.num_hidden_layers > 64) fail("{}: num_hidden_layers {} is implausibly large for a drafter", path, c.num_hidden_layers);
  if (c.target_layer_ids.empty()) fail("{}: field 'target_layer_ids' is empty", path);
  if (cfg.integer("num_target_layers", static_cast<int64_t>(c.target_layer_ids.size())) !=
      static_cast<int64_t>(c.target_layer_ids.size()))
    fail("{}: num_target_layers {} differs from the {} target_layer_ids", path, cfg.integer("num_target_layers"),
         c.target_layer_ids.size());
  if (c.mask_token_id < 0 || c.mask_token_id >= c.vocab_size)
    fail("{}: mask_token_id {} is outside the vocabulary (0..{})", path, c.mask_token_id, c.vocab_size - 1);
  if (cfg.integer("draft_vocab_size", c.vocab_size) != c.vocab_size)
    fail("{}: a reduced draft vocabulary (draft_vocab_size {}) is not supported", path, cfg.integer("draft_vocab_size"));
  if (const std::string m = cfg.string("markov_head_type", "vanilla"); m != "vanilla")
    fail("{}: markov_head_type '{}' is not supported (expected vanilla)", path, m);
  if (const std::string act = cfg.string("hidden_act", "silu"); act != "silu")
    fail("{}: hidden_act '{}' is not supported for a DSpark drafter (expected silu)", path, act);
  if (cfg.boolean("mla_use_nope", false)) fail("{}: mla_use_nope true is not supported for a DSpark drafter", path);
  if (cfg.boolean("mla_use_output_gate", false))
    fail("{}: mla_use_output_gate true is not supported for a DSpark drafter", path);
  if (cfg.has("rope_interleave") && cfg.boolean("rope_interleave", false))
    fail("{}: rope_interleave true (half-split rotation) is not supported; K3's MLA rotates interleaved pairs", path);
  if (cfg.has("logit_scale") && cfg.number("logit_scale") != 1.0f)
    fail("{}: logit_scale {} is not supported (expected 1)", path, cfg.number("logit_scale"));

  ModelConfig& a = c.attention;
  a.path = path;
  a.hidden_size = c.hidden_size;
  a.num_attention_heads = cfg.integer("num_attention_heads");
  a.q_lora_rank = cfg.integer("q_lora_rank");
  a.kv_lora_rank = cfg.integer("kv_lora_rank");
  a.qk_nope_head_dim = cfg.integer("qk_nope_head_dim");
  a.qk_rope_head_dim = cfg.integer("qk_rope_head_dim");
  a.v_head_dim = cfg.integer("v_head_dim");
  a.rms_norm_eps = c.rms_norm_eps;
  a.rope = read_rope(cfg, path);
  for (const char* name : {"num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim"})
    positive(path, name, cfg.integer(name));
  if (a.qk_rope_head_dim <= 0 || a.qk_rope_head_dim % 2)
    fail("{}: field 'qk_rope_head_dim' must be positive and even (got {})", path, a.qk_rope_head_dim);
  if (a.rope.yarn && (!(a.rope.factor >= 1.0f) || a.rope.original_max_position_embeddings <= 0))
    fail("{}: yarn rope needs factor >= 1 and original_max_position_embeddings > 0", path);
  if (!(a.rope.theta > 1.0f)) fail("{}: rope_theta must be > 1", path);
  return c;
}

DSparkConfig load_dspark_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return parse_dspark_config(read_input_file(path, "config.json", "(is this a DSpark drafter directory?)"), path);
}

void check_dspark_target(const DSparkConfig& d, const K3Config& t) {
  if (d.vocab_size != t.vocab_size)
    fail("{}: vocab_size {} differs from the target's ({}); the drafter uses the target's embedding and lm_head", d.path,
         d.vocab_size, t.vocab_size);
  if (d.hidden_size != t.hidden_size || d.target_hidden_size != t.hidden_size)
    fail("{}: hidden_size {} / target_hidden_size {} must both equal the target's hidden size {}", d.path,
         d.hidden_size, d.target_hidden_size, t.hidden_size);
  for (int64_t layer : d.target_layer_ids)
    if (layer < 0 || layer >= t.num_hidden_layers)
      fail("{}: target_layer_ids names layer {}, but the target has layers 0..{}", d.path, layer,
           t.num_hidden_layers - 1);
}

uint64_t DSparkConfig::weight_bytes() const {
  const ModelConfig& a = attention;
  const int64_t h = hidden_size, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t attn = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * a.num_attention_heads * qk +
                       h * kv_width() + a.kv_lora_rank +
                       a.kv_lora_rank * a.num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim) +
                       a.num_attention_heads * a.v_head_dim * h;
  const int64_t layer = attn + 3 * h * intermediate_size + 2 * h;
  const int64_t shared = h * target_hidden_size * static_cast<int64_t>(target_layer_ids.size()) + 2 * h +
                         2 * vocab_size * markov_rank;
  const int64_t confidence = confidence_head ? h + (confidence_with_markov ? markov_rank : 0) + 1 : 0;  // F32
  return static_cast<uint64_t>(2 * (num_hidden_layers * layer + shared) + 4 * confidence);
}

uint64_t DSparkConfig::state_bytes_per_position() const {
  return static_cast<uint64_t>(num_hidden_layers * kv_width()) * sizeof(float);
}

}  // namespace deltafin
