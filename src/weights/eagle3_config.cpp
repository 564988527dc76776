// Parsing and validation of a K3 EAGLE-3 head's config.json (see eagle3_config.hpp).
#include "weights/eagle3_config.hpp"

#include <algorithm>
#include <string_view>

#include "util/input_file.hpp"
#include "weights/config_reader.hpp"
#include "weights/k3_config.hpp"

namespace deltafin {
namespace {

void positive(const std::string& path, const char* name, int64_t value) {
  if (value <= 0) fail("{}: field '{}' must be positive (got {})", path, name, value);
}

// vLLM serves a DeepSeek-architecture EAGLE-3 draft as Eagle3DeepseekV2ForCausalLM (its
// Eagle3DeepseekV3ForCausalLM alias; a plain DeepseekV*ForCausalLM draft is renamed so).
bool deepseek_architecture(object top) {
  simdjson::dom::array names;
  if (top["architectures"].get_array().get(names) != simdjson::SUCCESS) return false;
  for (element e : names) {
    std::string_view n;
    if (e.get_string().get(n) != simdjson::SUCCESS) continue;
    if (n == "Eagle3DeepseekV2ForCausalLM" || n == "Eagle3DeepseekV3ForCausalLM" || n == "DeepseekV2ForCausalLM" ||
        n == "DeepseekV3ForCausalLM")
      return true;
  }
  return false;
}

}  // namespace

Eagle3Config parse_eagle3_config(const std::string& json, const std::string& path, const K3Config& target) {
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", path, simdjson::error_message(err));
  object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) fail("{}: top level must be a JSON object", path);
  const ConfigReader cfg(top, path);
  if (!deepseek_architecture(top))
    fail("{}: field 'architectures' names no DeepSeek EAGLE-3 head (expected Eagle3DeepseekV3ForCausalLM)", path);

  Eagle3Config c;
  c.path = path;
  c.hidden_size = cfg.integer("hidden_size");
  c.intermediate_size = cfg.integer("intermediate_size");
  c.vocab_size = cfg.integer("vocab_size");
  c.target_hidden_size = cfg.integer("target_hidden_size", c.hidden_size);
  c.rms_norm_eps = cfg.number("rms_norm_eps", 1e-6f);
  c.norm_before_residual = cfg.boolean("norm_before_residual", false);
  c.fc_norm = cfg.boolean("fc_norm", false);
  c.norm_output = cfg.boolean("norm_output", false);
  for (const char* name : {"hidden_size", "intermediate_size", "vocab_size", "target_hidden_size"})
    positive(path, name, cfg.integer(name, c.hidden_size));
  if (const int64_t layers = cfg.integer("num_hidden_layers"); layers != 1)
    fail("{}: num_hidden_layers {} is not supported (an EAGLE-3 head of one decoder layer)", path, layers);
  if (cfg.integer("draft_vocab_size", c.vocab_size) != c.vocab_size)
    fail("{}: a reduced draft vocabulary (draft_vocab_size {}, d2t/t2d) is not supported", path,
         cfg.integer("draft_vocab_size"));
  if (const std::string act = cfg.string("hidden_act", "silu"); act != "silu")
    fail("{}: hidden_act '{}' is not supported for an EAGLE-3 head (expected silu)", path, act);
  if (cfg.has("logit_scale") && cfg.number("logit_scale") != 1.0f)
    fail("{}: logit_scale {} is not supported (expected 1)", path, cfg.number("logit_scale"));
  if (cfg.has("n_routed_experts") && cfg.integer("n_routed_experts") > 0 && cfg.integer("first_k_dense_replace", 0) < 1)
    fail("{}: n_routed_experts: vLLM's EAGLE-3 DeepSeek layer is always a dense MLP; this head asks for experts", path);

  // The aux layers as vLLM's runner picks them (get_eagle3_aux_layers_from_config): the top-level
  // eagle_aux_hidden_state_layer_ids, else target_layer_ids + 1, else eagle_config.layer_ids; the
  // model's own eagle_config.eagle_aux_hidden_state_layer_ids next; else the default
  // (2, L / 2, L - 3) for an L-layer target.
  object eagle;
  const bool has_eagle = cfg.child("eagle_config", eagle);
  c.aux_layer_ids = cfg.integers("eagle_aux_hidden_state_layer_ids");
  if (c.aux_layer_ids.empty())
    for (int64_t id : cfg.integers("target_layer_ids")) c.aux_layer_ids.push_back(id + 1);
  if (has_eagle) {
    const ConfigReader e(eagle, path);
    if (!e.boolean("use_aux_hidden_state", true))
      fail("{}: eagle_config.use_aux_hidden_state false (a head on the last layer only) is not supported", path);
    if (c.aux_layer_ids.empty()) c.aux_layer_ids = e.integers("layer_ids");
    if (c.aux_layer_ids.empty()) c.aux_layer_ids = e.integers("eagle_aux_hidden_state_layer_ids");
  }
  const int64_t n = target.num_hidden_layers;
  if (c.aux_layer_ids.empty()) c.aux_layer_ids = {2, n / 2, n - 3};
  if (cfg.has("num_aux_hidden_states") && cfg.integer("num_aux_hidden_states") != static_cast<int64_t>(c.aux_layer_ids.size()))
    fail("{}: num_aux_hidden_states {} differs from the {} aux layer ids", path, cfg.integer("num_aux_hidden_states"),
         c.aux_layer_ids.size());
  for (int64_t id : c.aux_layer_ids) {
    if (id < 1 || id > n)
      fail("{}: eagle_aux_hidden_state_layer_ids names {}, but the target's stream enters layers 1..{} after a layer", path,
           id, n);
    c.target_layers.push_back(id - 1);
  }

  if (c.vocab_size != target.vocab_size)
    fail("{}: vocab_size {} differs from the target's ({})", path, c.vocab_size, target.vocab_size);
  if (c.hidden_size != target.hidden_size || c.target_hidden_size != target.hidden_size)
    fail("{}: hidden_size {} / target_hidden_size {} must both equal the target's hidden size {}", path, c.hidden_size,
         c.target_hidden_size, target.hidden_size);

  ModelConfig& a = c.attention;
  a.path = path;
  a.hidden_size = c.hidden_size;
  a.num_attention_heads = cfg.integer("num_attention_heads");
  a.q_lora_rank = cfg.integer("q_lora_rank", 0);
  a.kv_lora_rank = cfg.integer("kv_lora_rank");
  a.qk_nope_head_dim = cfg.integer("qk_nope_head_dim");
  a.qk_rope_head_dim = cfg.integer("qk_rope_head_dim");
  a.v_head_dim = cfg.integer("v_head_dim");
  a.rms_norm_eps = c.rms_norm_eps;
  a.rope = read_rope(cfg, path);
  for (const char* name : {"num_attention_heads", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim"})
    positive(path, name, cfg.integer(name));
  if (a.q_lora_rank < 0) fail("{}: field 'q_lora_rank' must not be negative", path);
  if (a.qk_rope_head_dim <= 0 || a.qk_rope_head_dim % 2)
    fail("{}: field 'qk_rope_head_dim' must be positive and even (got {})", path, a.qk_rope_head_dim);
  if (a.rope.yarn && (!(a.rope.factor >= 1.0f) || a.rope.original_max_position_embeddings <= 0))
    fail("{}: yarn rope needs factor >= 1 and original_max_position_embeddings > 0", path);
  if (!(a.rope.theta > 1.0f)) fail("{}: rope_theta must be > 1", path);
  return c;
}

Eagle3Config load_eagle3_config(const std::string& dir, const K3Config& target) {
  const std::string path = dir + "/config.json";
  return parse_eagle3_config(read_input_file(path, "config.json", "(is this an EAGLE-3 head directory?)"), path, target);
}

uint64_t Eagle3Config::weight_bytes(bool own_lm_head, bool own_embedding) const {
  const ModelConfig& a = attention;
  const int64_t h = hidden_size, in = 2 * h, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t q = a.q_lora_rank > 0 ? in * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * a.num_attention_heads * qk
                                      : in * a.num_attention_heads * qk;
  const int64_t attn = q + in * kv_width() + a.kv_lora_rank +
                       a.kv_lora_rank * a.num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim) +
                       a.num_attention_heads * a.v_head_dim * h;
  const int64_t aux = static_cast<int64_t>(target_layers.size());
  const int64_t layer = attn + 3 * h * intermediate_size + 3 * h;
  const int64_t rest = h * target_hidden_size * aux + h + (fc_norm ? aux * target_hidden_size : 0) +
                       (own_lm_head ? vocab_size * h : 0) + (own_embedding ? vocab_size * h : 0);
  return static_cast<uint64_t>(2 * (layer + rest));
}

}  // namespace deltafin
