// K2Model: spine loading and the forward pass (see k2_model.hpp).
#include "model/k2_model.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "model/family.hpp"
#include "model/stream_wait.hpp"
#include "model/rope.hpp"
#include "model/state_bytes.hpp"

namespace deltafin {
namespace {

// The MLA-internal norms (q_a_layernorm, kv_a_layernorm) use 1e-6 in the reference
// implementations whatever rms_norm_eps says.
constexpr float kMlaNormEps = 1e-6f;
constexpr GatedActivation kSiLU{GatedActivation::kSiLU};

}  // namespace

ExpertTable k2_expert_table(const WeightIndex& index, const ModelConfig& c) {
  static const char* const kNames[3] = {"gate_proj", "up_proj", "down_proj"};
  return ExpertTable(
      index, c.num_hidden_layers, c.n_routed_experts, [&](int64_t l) { return c.is_moe_layer(l); },
      [](int64_t l, int64_t e, int p) { return fmt::format("model.layers.{}.mlp.experts.{}.{}", l, e, kNames[p]); },
      {{{c.moe_intermediate_size, c.hidden_size}, {c.moe_intermediate_size, c.hidden_size},
        {c.hidden_size, c.moe_intermediate_size}}});
}

K2Model::K2Model(const WeightIndex& index, const ModelConfig& config, Backend& backend, ExpertStore& experts,
                 SpineStream* stream)
    : config_(config), backend_(backend), experts_(experts), local_experts_(backend, experts), scratch_(backend), stream_(stream) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  SpineLoader load(backend, index, stream);
  const Rope rope(c);
  inv_freq_ = load.upload(rope.inv_freq());
  mla_ = {{c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank, c.softmax_scale()},
          h, c.q_lora_rank, kMlaNormEps, false, &inv_freq_.tensor, rope.attention_factor()};
  router_spec_ = {c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling_factor};
  load.begin_unit(0);
  embed_ = load.matrix("model.embed_tokens", c.vocab_size, h);
  load.begin_unit(c.num_hidden_layers + 1);
  lm_head_ = load.matrix(c.tie_word_embeddings && !index.find("lm_head.weight") ? "model.embed_tokens" : "lm_head", c.vocab_size, h);
  final_norm_ = load.vector("model.norm.weight", h);
  layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    const std::string p = fmt::format("model.layers.{}.", l);
    load.begin_unit(l + 1);
    L.input_norm = load.vector(p + "input_layernorm.weight", h);
    L.post_attention_norm = load.vector(p + "post_attention_layernorm.weight", h);
    L.attn = load_mla(load, p + "self_attn.", mla_);
    L.moe = c.is_moe_layer(l);
    const std::string m = p + "mlp.";
    if (!L.moe) {
      L.mlp = load_mlp(load, m, c.intermediate_size, h);
      continue;
    }
    L.router = load.matrix(m + "gate", c.n_routed_experts, h);
    if (index.find(m + "gate.e_score_correction_bias"))
      L.router_bias = load.vector(m + "gate.e_score_correction_bias", c.n_routed_experts);
    if (c.n_shared_experts > 0) L.shared = load_mlp(load, m + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts, h);
  }
  spine_bytes_ = load.bytes();
}

LatentKvCache K2Model::new_cache() const {
  return LatentKvCache(backend_, config_.num_hidden_layers, config_.kv_lora_rank, config_.qk_rope_head_dim);
}

namespace {
StateLayout k2_layout(const LatentKvCache& cache, int64_t positions) {
  return {kK2StateFamily, cache.dims(), positions, static_cast<uint64_t>(positions) * cache.position_bytes()};
}
}  // namespace

std::vector<std::byte> K2Model::save_state(const LatentKvCache& cache, int64_t positions) const {
  std::vector<std::byte> out = state_bytes_head(k2_layout(cache, positions));
  cache.save_rows(positions, out);
  return out;
}

void K2Model::load_state(LatentKvCache& cache, int64_t positions, std::span<const std::byte> bytes) const {
  cache.load_rows(positions, state_bytes_payload(bytes, k2_layout(cache, positions)).data());
}

void K2Model::moe(int64_t layer, const Tensor& x, int64_t start, const Tensor& out) {
  const ModelConfig& c = config_;
  const Layer& L = layers_[layer];
  // The next layer's router guesses only when it is resident (a streamed one is still being read).
  const bool next_moe = layer + 1 < c.num_hidden_layers && layers_[layer + 1].moe && !(stream_ && stream_->streamed(layer + 2));
  const RouterWeights next = next_moe ? router(layer + 1) : RouterWeights{};
  const Routing routing = route_and_request(backend_, scratch_, *producer_, experts_, router_spec_, router(layer), layer, x, start, stats_,
                                            lookahead_, next_moe ? &next : nullptr);
  if (recorder_) recorder_->layer(layer, routing.chosen);
  if (c.n_shared_experts == 0) return run_routed(backend_, scratch_, *producer_, routing, x, c.moe_intermediate_size, kSiLU, out);
  run_mlp(backend_, scratch_, L.shared, kSiLU, x, out);  // while the routed experts are read
  const Tensor routed = scratch_.take(x.rows, c.hidden_size);  // [n, hidden]
  run_routed(backend_, scratch_, *producer_, routing, x, c.moe_intermediate_size, kSiLU, routed);
  backend_.add(out, routed, out);
}

void K2Model::forward(LatentKvCache& cache, const int32_t* tokens, int64_t n, int64_t start, float* logits,
                      bool all_logits, const LayerObserver& observer) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  cache.reserve(start + n);
  experts_.begin_pass();
  lookahead_.begin_pass(experts_);
  if (recorder_) recorder_->pass(start, n);
  scratch_.reset();
  std::vector<float> seen;  // observer copies [n, hidden]
  const auto observe = [&](int64_t layer, const Tensor& t) {
    if (!observer) return;
    seen.resize(n * h);
    backend_.download(t, seen.data());
    observer(layer, seen.data(), n);
  };
  const Tensor ids = upload_tokens(backend_, scratch_, tokens, n, c.vocab_size);
  const Tensor x = scratch_.take(n, h), normed = scratch_.take(n, h), delta = scratch_.take(n, h);  // [n, hidden]
  enter_unit(stream_, 0, stats_);
  backend_.embed(embed_.weight, ids, x);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    enter_unit(stream_, l + 1, stats_);
    observe(l, x);
    const Layer& L = layers_[l];
    const Scratch::Mark frame = scratch_.mark();
    backend_.rmsnorm(x, L.input_norm.tensor, c.rms_norm_eps, normed);
    run_mla(backend_, scratch_, mla_, L.attn, cache, l, normed, start, delta);
    backend_.add(x, delta, x);
    backend_.rmsnorm(x, L.post_attention_norm.tensor, c.rms_norm_eps, normed);
    if (L.moe) moe(l, normed, start, delta);
    else run_mlp(backend_, scratch_, L.mlp, kSiLU, normed, delta);
    backend_.add(x, delta, x);
    scratch_.release(frame);
  }
  enter_unit(stream_, c.num_hidden_layers + 1, stats_);
  backend_.rmsnorm(x, final_norm_.tensor, c.rms_norm_eps, normed);
  observe(c.num_hidden_layers, normed);
  project_logits(backend_, scratch_, lm_head_.weight, normed, all_logits, logits);
  ++stats_.passes;
  stats_.positions += n;
  stats_.scratch_peak = scratch_.peak();
}

// --- the family -------------------------------------------------------------------------------

namespace {

FamilyDescription describe_k2(const std::string& path) {
  const ModelConfig c = load_model_config(path);
  FamilyDescription d{{}, k2_bytes_from_config(c), c.num_hidden_layers, 0, c.n_routed_experts, c.num_experts_per_tok,
                      c.max_position_embeddings};
  d.expert_input = c.hidden_size;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) d.moe_layers += c.is_moe_layer(l);
  d.lines.push_back(fmt::format("architecture   {} (DeepSeek-V3 architecture){}", c.model_type,
                                c.outer_model_type.empty() ? "" : ", wrapped in " + c.outer_model_type));
  d.lines.push_back(fmt::format("layers         {} ({} dense, {} MoE), hidden {}, vocab {}", c.num_hidden_layers,
                                c.num_hidden_layers - d.moe_layers, d.moe_layers, c.hidden_size, c.vocab_size));
  d.lines.push_back(fmt::format("attention      MLA, {} heads, {}, kv_lora {}, nope {} + rope {}, v {}",
                                c.num_attention_heads,
                                c.q_lora_rank ? fmt::format("q_lora {}", c.q_lora_rank) : "direct q_proj",
                                c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim));
  d.lines.push_back(fmt::format("rope           theta {}, {}", c.rope.theta,
                                c.rope.yarn ? fmt::format("YaRN factor {} over {} positions", c.rope.factor,
                                                          c.rope.original_max_position_embeddings)
                                            : "no scaling"));
  d.lines.push_back(fmt::format("experts        {} routed per MoE layer, top-{}, {} shared, groups {} (top {}), width {}{}",
                                c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts, c.n_group, c.topk_group,
                                c.moe_intermediate_size,
                                c.int4_experts ? ", INT4 group-32" : c.fp8_block_quantized ? ", block-FP8" : ""));
  return d;
}

}  // namespace

const Family kKimiK2Family = {
    "kimi_k2, deepseek_v3",
    [](std::string_view outer, std::string_view text) {
      const std::string_view type = text.empty() ? outer : text;
      return type == "kimi_k2" || type == "deepseek_v3";
    },
    describe_k2,
    [](const std::string& path, const WeightIndex& index) { return k2_expert_table(index, load_model_config(path)); },
};

}  // namespace deltafin
