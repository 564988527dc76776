// Parsing and validation of a Kimi K3 config.json (see k3_config.hpp).
#include "weights/k3_config.hpp"

#include <algorithm>

#include "weights/config_reader.hpp"
#include "util/input_file.hpp"

namespace deltafin {
namespace {

// compressed-tensors format of the routed experts: "" when unquantized.
std::string quant_format(const ConfigReader& outer, const ConfigReader& text, const std::string& path) {
  object q;
  if (!text.child("quantization_config", q) && !outer.child("quantization_config", q)) return "";
  ConfigReader quant(q, path);
  const std::string method = quant.string("quant_method", "");
  if (method != "compressed-tensors") fail("{}: quantization method '{}' is not supported", path, method);
  std::string format = quant.string("format", "");
  object groups, group0;
  if (format.empty() && quant.child("config_groups", groups) && ConfigReader(groups, path).child("group_0", group0))
    format = ConfigReader(group0, path).string("format", "");
  if (format != "mxfp4-pack-quantized")
    fail("{}: quantization format '{}' is not supported for Kimi K3 (expected mxfp4-pack-quantized)", path, format);
  return format;
}

void check(bool ok, const std::string& path, const char* what) {
  if (!ok) fail("{}: {}", path, what);
}

}  // namespace

K3Config parse_k3_config(const std::string& json, const std::string& path) {
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", path, simdjson::error_message(err));
  object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) fail("{}: top level must be a JSON object", path);
  ConfigReader outer(top, path);
  object text_obj;
  const bool nested = outer.child("text_config", text_obj);
  ConfigReader cfg(nested ? text_obj : top, path);

  K3Config c;
  c.path = path;
  c.vocab_size = cfg.integer("vocab_size");
  c.max_position_embeddings = cfg.integer("max_position_embeddings", 0);
  c.num_nextn_predict_layers = cfg.integer("num_nextn_predict_layers", 0);
  c.hidden_size = cfg.integer("hidden_size");
  c.num_hidden_layers = cfg.integer("num_hidden_layers");
  c.intermediate_size = cfg.integer("intermediate_size");
  c.first_k_dense_replace = cfg.integer("first_k_dense_replace", 1);
  c.moe_layer_freq = cfg.integer("moe_layer_freq", 1);
  c.rms_norm_eps = cfg.number("rms_norm_eps", 1e-5f);
  c.attn_res_block_size = cfg.integer("attn_res_block_size");
  c.tie_word_embeddings = cfg.boolean("tie_word_embeddings", false);
  c.bos_token_id = cfg.token_id("bos_token_id");
  c.eos_token_id = cfg.token_id("eos_token_id");
  if (c.eos_token_id >= c.vocab_size)
    fail("{}: eos_token_id {} is outside the vocabulary (0..{})", path, c.eos_token_id, c.vocab_size - 1);

  const std::string act = cfg.string("hidden_act", "situ");
  if (act != "situ") fail("{}: hidden_act '{}' is not supported for Kimi K3 (expected situ)", path, act);
  c.situ_beta = cfg.number("activation_situ_beta", 1.0f);  // null means 1.0 in the release code
  c.situ_linear_beta = cfg.number("activation_situ_linear_beta", 0.0f);

  object linear_obj;
  if (!cfg.child("linear_attn_config", linear_obj)) fail("{}: missing field 'linear_attn_config'", path);
  ConfigReader linear(linear_obj, path);
  c.kda_heads = linear.integer("num_heads");
  c.kda_head_dim = linear.integer("head_dim");
  c.conv_kernel = linear.integer("short_conv_kernel_size", 4);
  c.gate_lower_bound = linear.number("gate_lower_bound");
  if (!linear.boolean("use_full_rank_gate", true))
    fail("{}: linear_attn_config.use_full_rank_gate false is not supported", path);
  if (c.num_hidden_layers <= 0 || c.num_hidden_layers > 4096)
    fail("{}: num_hidden_layers {} is out of range (1..4096)", path, c.num_hidden_layers);
  const std::vector<int64_t> kda_layers = linear.integers("kda_layers");  // 1-based
  c.is_mla.assign(c.num_hidden_layers, true);
  for (int64_t one_based : kda_layers) {
    if (one_based < 1 || one_based > c.num_hidden_layers)
      fail("{}: linear_attn_config.kda_layers names layer {} of {}", path, one_based, c.num_hidden_layers);
    c.is_mla[one_based - 1] = false;
  }

  c.num_attention_heads = cfg.integer("num_attention_heads");
  c.q_lora_rank = cfg.integer("q_lora_rank");
  c.kv_lora_rank = cfg.integer("kv_lora_rank");
  c.qk_nope_head_dim = cfg.integer("qk_nope_head_dim");
  c.qk_rope_head_dim = cfg.integer("qk_rope_head_dim");
  c.v_head_dim = cfg.integer("v_head_dim");
  c.mla_output_gate = cfg.boolean("mla_use_output_gate", true);
  if (!cfg.boolean("mla_use_nope", true)) fail("{}: mla_use_nope false (rotary MLA) is not supported for Kimi K3", path);

  c.num_experts = cfg.integer("num_experts");
  c.num_experts_per_token = cfg.integer("num_experts_per_token");
  c.num_shared_experts = cfg.integer("num_shared_experts", 0);
  c.moe_intermediate_size = cfg.integer("moe_intermediate_size");
  c.latent_size = cfg.integer("routed_expert_hidden_size");
  c.latent_norm = cfg.boolean("latent_moe_use_norm", true);
  c.renormalize = cfg.boolean("moe_renormalize", true);
  c.routed_scaling_factor = cfg.number("routed_scaling_factor", 1.0f);
  if (!(c.routed_scaling_factor > 0 && c.routed_scaling_factor <= 1e4f))
    fail("{}: field 'routed_scaling_factor' must be in (0, 1e4] (got {})", path, c.routed_scaling_factor);
  const std::string router = cfg.string("moe_router_activation_func", "sigmoid");
  if (router != "sigmoid") fail("{}: moe_router_activation_func '{}' is not supported (expected sigmoid)", path, router);
  if (cfg.integer("num_expert_group", 1) != 1 || cfg.integer("topk_group", 1) != 1)
    fail("{}: group-limited routing is not supported for Kimi K3 (num_expert_group must be 1)", path);
  c.mxfp4_experts = !quant_format(outer, cfg, path).empty();

  for (auto [name, value] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                             {"num_hidden_layers", c.num_hidden_layers}, {"attn_res_block_size", c.attn_res_block_size},
                             {"linear_attn_config.num_heads", c.kda_heads}, {"linear_attn_config.head_dim", c.kda_head_dim},
                             {"num_attention_heads", c.num_attention_heads}, {"kv_lora_rank", c.kv_lora_rank},
                             {"q_lora_rank", c.q_lora_rank}, {"qk_nope_head_dim", c.qk_nope_head_dim},
                             {"v_head_dim", c.v_head_dim}, {"num_experts", c.num_experts},
                             {"num_experts_per_token", c.num_experts_per_token},
                             {"moe_intermediate_size", c.moe_intermediate_size},
                             {"routed_expert_hidden_size", c.latent_size}, {"intermediate_size", c.intermediate_size}})
    if (value <= 0) fail("{}: field '{}' must be positive (got {})", path, name, value);
  check(c.qk_rope_head_dim >= 0, path, "field 'qk_rope_head_dim' must be >= 0");
  check(c.num_experts_per_token <= c.num_experts, path, "num_experts_per_token exceeds num_experts");
  check(c.conv_kernel >= 1, path, "linear_attn_config.short_conv_kernel_size must be >= 1");
  check(c.rms_norm_eps > 0, path, "field 'rms_norm_eps' must be positive");
  check(c.moe_layer_freq > 0, path, "field 'moe_layer_freq' must be positive");
  check(c.situ_beta > 0 && c.situ_linear_beta >= 0, path, "SiTU betas must be positive");
  return c;
}

K3Config load_k3_config(const std::string& path) {
  return parse_k3_config(read_input_file(path, "config.json", "(is this a model directory?)"), path);
}

ModelBytes k3_bytes_from_config(const K3Config& c) {
  const uint64_t h = c.hidden_size, p = c.kda_heads * c.kda_head_dim, hd = c.kda_head_dim;
  const uint64_t mla_heads = c.num_attention_heads;
  ModelBytes b;
  uint64_t params = c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + 3 * h;  // + final norm, output AttnRes
  uint64_t spine = 2 * params;
  b.spine_embed = stored::bf16(c.vocab_size, h);
  b.spine_head = spine - b.spine_embed;
  auto add = [&](uint64_t rows, uint64_t cols) { spine += stored::bf16(rows, cols); params += rows * cols; };
  auto add_f32 = [&](uint64_t n) { spine += 4 * n; params += n; };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const uint64_t before = spine;
    add(6, h);  // input/post norms, two AttnRes norms and projections
    if (!c.is_mla[l]) {
      for (int i = 0; i < 4; ++i) add(p, h);  // q, k, v, g
      add(h, p);                              // o
      add(hd, h);                             // f_a
      add(p, hd);                             // f_b
      add(c.kda_heads, h);                    // b
      add_f32(3 * p * c.conv_kernel + p + c.kda_heads + hd);  // conv, dt_bias, A_log, o_norm
    } else {
      add(c.q_lora_rank, h);
      add(mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim), c.q_lora_rank);
      add(c.kv_lora_rank + c.qk_rope_head_dim, h);
      add(mla_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
      if (c.mla_output_gate) add(mla_heads * c.v_head_dim, h);
      add(h, mla_heads * c.v_head_dim);
      add(1, c.q_lora_rank + c.kv_lora_rank);
    }
    if (!c.is_moe_layer(l)) {
      add(2 * c.intermediate_size, h);
      add(h, c.intermediate_size);
      b.spine_layers.push_back(spine - before);
      continue;
    }
    const uint64_t shared = c.moe_intermediate_size * c.num_shared_experts, lat = c.latent_size;
    const uint64_t inter = c.moe_intermediate_size;
    add(c.num_experts, h);
    add_f32(c.num_experts);
    add(lat, h);
    add(h, lat);
    add(1, lat);
    if (shared) {
      add(2 * shared, h);
      add(h, shared);
    }
    const uint64_t expert = c.mxfp4_experts ? 2 * stored::mxfp4(inter, lat) + stored::mxfp4(lat, inter) : 3 * stored::bf16(inter, lat);
    b.routed += c.num_experts * expert;
    b.routed_per_token += c.num_experts_per_token * expert;
    params += c.num_experts * 3 * inter * lat;
    b.spine_layers.push_back(spine - before);
  }
  b.spine = spine;
  b.parameters = params;
  const uint64_t mla = std::count(c.is_mla.begin(), c.is_mla.end(), true), kda = c.num_hidden_layers - mla;
  b.kv_per_position = mla * (c.kv_lora_rank + c.qk_rope_head_dim) * sizeof(float);
  b.recurrent_state = kda * (p * hd + 3 * (c.conv_kernel - 1) * p) * sizeof(float);
  b.activations = k3_pass_activations(c);
  return b;
}

}  // namespace deltafin
