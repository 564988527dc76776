// Parsing and validation of config.json (see model_config.hpp).
#include <algorithm>

#include "weights/model_config.hpp"

#include <simdjson.h>

#include <cmath>

#include "util/error.hpp"
#include "weights/config_reader.hpp"
#include "util/input_file.hpp"

namespace deltafin {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

}  // namespace

RopeConfig read_rope(const ConfigReader& cfg, const std::string& path) {
  RopeConfig rope;
  object params;
  const bool v5 = cfg.child("rope_parameters", params);
  if (!v5 && !cfg.child("rope_scaling", params)) {
    rope.theta = cfg.number("rope_theta", 10000.0f);
    return rope;
  }
  ConfigReader p(params, path);
  rope.theta = v5 ? p.number("rope_theta", cfg.number("rope_theta", 10000.0f)) : cfg.number("rope_theta", 10000.0f);
  const std::string type = p.string("rope_type", p.string("type", "default"));
  if (type == "default") return rope;
  if (type != "yarn") fail("{}: rope type '{}' is not supported (expected 'yarn' or 'default')", path, type);
  rope.yarn = true;
  rope.factor = p.number("factor");
  rope.original_max_position_embeddings = p.integer("original_max_position_embeddings");
  rope.beta_fast = p.number("beta_fast", 32.0f);
  rope.beta_slow = p.number("beta_slow", 1.0f);
  rope.mscale = p.number("mscale", 0.0f);
  rope.mscale_all_dim = p.number("mscale_all_dim", 0.0f);
  return rope;
}

namespace {

void check_positive(const ModelConfig& c, const char* name, int64_t value) {
  if (value <= 0) fail("{}: field '{}' must be positive (got {})", c.path, name, value);
}

void validate(const ModelConfig& c) {
  check_positive(c, "vocab_size", c.vocab_size);
  check_positive(c, "hidden_size", c.hidden_size);
  check_positive(c, "num_hidden_layers", c.num_hidden_layers);
  if (c.num_hidden_layers > 4096) fail("{}: num_hidden_layers {} is implausibly large", c.path, c.num_hidden_layers);
  check_positive(c, "num_attention_heads", c.num_attention_heads);
  check_positive(c, "kv_lora_rank", c.kv_lora_rank);
  check_positive(c, "qk_nope_head_dim", c.qk_nope_head_dim);
  check_positive(c, "v_head_dim", c.v_head_dim);
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim % 2)
    fail("{}: field 'qk_rope_head_dim' must be positive and even (got {})", c.path, c.qk_rope_head_dim);
  if (c.first_k_dense_replace > 0 || c.n_routed_experts == 0) check_positive(c, "intermediate_size", c.intermediate_size);
  if (c.moe_layer_freq <= 0) fail("{}: field 'moe_layer_freq' must be positive", c.path);
  if (c.n_routed_experts > 0) {
    check_positive(c, "moe_intermediate_size", c.moe_intermediate_size);
    check_positive(c, "num_experts_per_tok", c.num_experts_per_tok);
    if (c.num_experts_per_tok > c.n_routed_experts)
      fail("{}: num_experts_per_tok {} exceeds n_routed_experts {}", c.path, c.num_experts_per_tok, c.n_routed_experts);
    if (c.n_group <= 0 || c.n_routed_experts % c.n_group)
      fail("{}: n_group {} must divide n_routed_experts {}", c.path, c.n_group, c.n_routed_experts);
    if (c.topk_group <= 0 || c.topk_group > c.n_group)
      fail("{}: topk_group {} must be in 1..n_group ({})", c.path, c.topk_group, c.n_group);
    if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group))
      fail("{}: top-{} cannot be chosen from {} groups of {} experts", c.path, c.num_experts_per_tok,
           c.topk_group, c.n_routed_experts / c.n_group);
    if (c.n_group > 1 && c.n_routed_experts / c.n_group < 2)
      fail("{}: group-limited routing needs at least 2 experts per group", c.path);
  }
  if (!(c.rms_norm_eps > 0)) fail("{}: field 'rms_norm_eps' must be positive", c.path);
  if (c.rope.yarn && (!(c.rope.factor >= 1.0f) || c.rope.original_max_position_embeddings <= 0))
    fail("{}: yarn rope needs factor >= 1 and original_max_position_embeddings > 0", c.path);
  if (!(c.rope.theta > 1.0f)) fail("{}: rope_theta must be > 1", c.path);
}

float yarn_mscale(float scale, float mscale) {
  if (scale <= 1.0f) return 1.0f;
  return 0.1f * mscale * std::log(scale) + 1.0f;
}

}  // namespace

float ModelConfig::softmax_scale() const {
  float scale = 1.0f / std::sqrt(static_cast<float>(qk_head_dim()));
  if (rope.yarn && rope.mscale_all_dim != 0.0f) {
    const float m = yarn_mscale(rope.factor, rope.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

float ModelConfig::rope_attention_factor() const {
  if (!rope.yarn) return 1.0f;
  if (rope.mscale != 0.0f && rope.mscale_all_dim != 0.0f)
    return yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim);
  return yarn_mscale(rope.factor, 1.0f);
}

ModelConfig parse_model_config(const std::string& json, const std::string& path) {
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", path, simdjson::error_message(err));
  object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) fail("{}: top level must be a JSON object", path);

  ModelConfig c;
  c.path = path;
  ConfigReader outer(top, path);
  object text;
  const bool nested = outer.child("text_config", text);
  ConfigReader cfg(nested ? text : top, path);
  if (nested) c.outer_model_type = outer.string("model_type", "");
  c.model_type = cfg.string("model_type", "");
  if (c.model_type != "deepseek_v3" && c.model_type != "kimi_k2")
    fail("{}: model_type '{}' is not a Kimi K2-family model (expected deepseek_v3 or kimi_k2)", path, c.model_type);

  c.vocab_size = cfg.integer("vocab_size");
  c.hidden_size = cfg.integer("hidden_size");
  c.num_hidden_layers = cfg.integer("num_hidden_layers");
  c.num_attention_heads = cfg.integer("num_attention_heads");
  c.q_lora_rank = cfg.integer("q_lora_rank", 0);
  c.kv_lora_rank = cfg.integer("kv_lora_rank");
  c.qk_nope_head_dim = cfg.integer("qk_nope_head_dim");
  c.qk_rope_head_dim = cfg.integer("qk_rope_head_dim");
  c.v_head_dim = cfg.integer("v_head_dim");
  c.n_routed_experts = cfg.integer("n_routed_experts", 0);
  c.intermediate_size = cfg.integer("intermediate_size", 0);
  if (c.n_routed_experts > 0) {
    c.moe_intermediate_size = cfg.integer("moe_intermediate_size");
    c.num_experts_per_tok = cfg.integer("num_experts_per_tok");
    c.n_shared_experts = cfg.integer("n_shared_experts", 0);
    c.first_k_dense_replace = cfg.integer("first_k_dense_replace", 0);
    c.moe_layer_freq = cfg.integer("moe_layer_freq", 1);
    c.n_group = cfg.integer("n_group", 1);
    c.topk_group = cfg.integer("topk_group", 1);
    c.norm_topk_prob = cfg.boolean("norm_topk_prob", true);
    c.routed_scaling_factor = cfg.number("routed_scaling_factor", 1.0f);
    if (!(c.routed_scaling_factor > 0 && c.routed_scaling_factor <= 1e4f))
      fail("{}: field 'routed_scaling_factor' must be in (0, 1e4] (got {})", path, c.routed_scaling_factor);
    const std::string scoring = cfg.string("scoring_func", "sigmoid");
    if (scoring != "sigmoid") fail("{}: scoring_func '{}' is not supported (expected sigmoid)", path, scoring);
  }
  const std::string act = cfg.string("hidden_act", "silu");
  if (act != "silu") fail("{}: hidden_act '{}' is not supported (expected silu)", path, act);
  c.rms_norm_eps = cfg.number("rms_norm_eps", 1e-6f);
  c.max_position_embeddings = cfg.integer("max_position_embeddings", 4096);
  c.num_nextn_predict_layers = cfg.integer("num_nextn_predict_layers", 0);
  c.tie_word_embeddings = cfg.boolean("tie_word_embeddings", false);
  c.bos_token_id = cfg.token_id("bos_token_id");
  c.eos_token_id = cfg.token_id("eos_token_id");
  if (c.eos_token_id >= c.vocab_size)
    fail("{}: eos_token_id {} is outside the vocabulary (0..{})", path, c.eos_token_id, c.vocab_size - 1);
  c.rope = read_rope(cfg, path);
  if (cfg.boolean("rope_interleave", true) == false)
    fail("{}: rope_interleave false is not supported (Kimi/DeepSeek checkpoints are interleaved)", path);

  object quant;
  if (cfg.child("quantization_config", quant) || outer.child("quantization_config", quant)) {
    ConfigReader q(quant, path);
    const std::string method = q.string("quant_method", "");
    if (method == "fp8") {
      c.fp8_block_quantized = true;
      simdjson::dom::array block;
      element e;
      if (quant["weight_block_size"].get(e) == simdjson::SUCCESS && e.get_array().get(block) == simdjson::SUCCESS) {
        for (element dim : block) {
          int64_t v;
          if (dim.get_int64().get(v) != simdjson::SUCCESS || v != 128)
            fail("{}: fp8 weight_block_size must be [128, 128]", path);
        }
      }
    } else if (method == "compressed-tensors") {
      std::string format = q.string("format", "");
      object groups, group0;
      if (format.empty() && q.child("config_groups", groups) && ConfigReader(groups, path).child("group_0", group0))
        format = ConfigReader(group0, path).string("format", "");
      if (format != "pack-quantized")
        fail("{}: compressed-tensors format '{}' is not supported (expected pack-quantized INT4)", path, format);
      c.int4_experts = true;
    } else {
      fail("{}: quantization method '{}' is not supported", path, method);
    }
  }
  validate(c);
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  return parse_model_config(read_input_file(path, "config.json", "(is this a model directory?)"), path);
}

ModelBytes k2_bytes_from_config(const ModelConfig& c) {
  const uint64_t h = c.hidden_size, heads = c.num_attention_heads;
  auto linear = [&](uint64_t rows, uint64_t cols) { return c.fp8_block_quantized ? stored::block_fp8(rows, cols) : stored::bf16(rows, cols); };
  ModelBytes b;
  b.spine = stored::bf16(c.vocab_size, h) * (c.tie_word_embeddings ? 1 : 2) + 2 * h;
  b.spine_embed = stored::bf16(c.vocab_size, h);
  b.spine_head = b.spine - b.spine_embed;
  b.parameters = c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + h;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    uint64_t attn = 0, params = 0;
    auto add = [&](uint64_t rows, uint64_t cols) { attn += linear(rows, cols); params += rows * cols; };
    if (c.q_lora_rank > 0) {
      add(c.q_lora_rank, h);
      add(heads * c.qk_head_dim(), c.q_lora_rank);
      attn += 2 * c.q_lora_rank;
      params += c.q_lora_rank;
    } else {
      add(heads * c.qk_head_dim(), h);
    }
    add(c.kv_lora_rank + c.qk_rope_head_dim, h);
    add(heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    add(h, heads * c.v_head_dim);
    attn += 2 * c.kv_lora_rank + 4 * h;  // kv_a_layernorm, two decoder norms
    params += c.kv_lora_rank + 2 * h;
    if (!c.is_moe_layer(l)) {
      add(c.intermediate_size, h);
      add(c.intermediate_size, h);
      add(h, c.intermediate_size);
    } else {
      const uint64_t shared = c.moe_intermediate_size * c.n_shared_experts, inter = c.moe_intermediate_size;
      if (shared) {
        add(shared, h);
        add(shared, h);
        add(h, shared);
      }
      attn += stored::bf16(c.n_routed_experts, h) + 4 * c.n_routed_experts;  // router weight + f32 bias
      params += c.n_routed_experts * (h + 1);
      const uint64_t expert = c.int4_experts ? 2 * stored::int4_g32(inter, h) + stored::int4_g32(h, inter)
                                             : 2 * linear(inter, h) + linear(h, inter);
      b.routed += c.n_routed_experts * expert;
      b.routed_per_token += c.num_experts_per_tok * expert;
      params += c.n_routed_experts * 3 * inter * h;
    }
    b.spine += attn;
    b.spine_layers.push_back(attn);
    b.parameters += params;
  }
  b.kv_per_position = static_cast<uint64_t>(c.num_hidden_layers) * (c.kv_lora_rank + c.qk_rope_head_dim) * sizeof(float);
  b.activations = k2_pass_activations(c);
  return b;
}

}  // namespace deltafin
