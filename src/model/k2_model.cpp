// K2Model: spine loading and the forward pass (see k2_model.hpp).
#include "model/k2_model.hpp"

#include <algorithm>

#include "model/router.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

// The MLA-internal norms (q_a_layernorm, kv_a_layernorm) use 1e-6 in the reference
// implementations whatever rms_norm_eps says.
constexpr float kMlaNormEps = 1e-6f;

}  // namespace

SpineMatrix K2Model::load(const std::string& name, int64_t rows, int64_t cols) {
  SpineMatrix m = load_spine_matrix(index_, name, rows, cols);
  spine_bytes_ += m.bytes();
  return m;
}

ExpertTable k2_expert_table(const WeightIndex& index, const ModelConfig& c) {
  static const char* const kNames[3] = {"gate_proj", "up_proj", "down_proj"};
  return ExpertTable(
      index, c.num_hidden_layers, c.n_routed_experts, [&](int64_t l) { return c.is_moe_layer(l); },
      [](int64_t l, int64_t e, int p) { return fmt::format("model.layers.{}.mlp.experts.{}.{}", l, e, kNames[p]); },
      {{{c.moe_intermediate_size, c.hidden_size}, {c.moe_intermediate_size, c.hidden_size},
        {c.hidden_size, c.moe_intermediate_size}}});
}

K2Model::K2Model(const WeightIndex& index, const ModelConfig& config, Backend& backend, ExpertStore& experts)
    : config_(config), index_(index), backend_(backend), experts_(experts), rope_(config) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, heads = c.num_attention_heads;
  embed_ = load("model.embed_tokens", c.vocab_size, h);
  lm_head_ = c.tie_word_embeddings && !index.find("lm_head.weight") ? load("model.embed_tokens", c.vocab_size, h)
                                                                     : load("lm_head", c.vocab_size, h);
  final_norm_ = load_spine_vector(index, "model.norm.weight", h);
  layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    const std::string p = fmt::format("model.layers.{}.", l);
    L.input_norm = load_spine_vector(index, p + "input_layernorm.weight", h);
    L.post_attention_norm = load_spine_vector(index, p + "post_attention_layernorm.weight", h);
    const std::string a = p + "self_attn.";
    if (c.q_lora_rank > 0) {
      L.q_a = load(a + "q_a_proj", c.q_lora_rank, h);
      L.q_a_norm = load_spine_vector(index, a + "q_a_layernorm.weight", c.q_lora_rank);
      L.q_b = load(a + "q_b_proj", heads * c.qk_head_dim(), c.q_lora_rank);
    } else {
      L.q_proj = load(a + "q_proj", heads * c.qk_head_dim(), h);
    }
    L.kv_a = load(a + "kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, h);
    L.kv_a_norm = load_spine_vector(index, a + "kv_a_layernorm.weight", c.kv_lora_rank);
    L.kv_b = load(a + "kv_b_proj", heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    L.o_proj = load(a + "o_proj", h, heads * c.v_head_dim);
    L.moe = c.is_moe_layer(l);
    const std::string m = p + "mlp.";
    if (!L.moe) {
      L.mlp = {load(m + "gate_proj", c.intermediate_size, h), load(m + "up_proj", c.intermediate_size, h),
               load(m + "down_proj", h, c.intermediate_size)};
      continue;
    }
    L.router = load(m + "gate", c.n_routed_experts, h);
    if (index.find(m + "gate.e_score_correction_bias"))
      L.router_bias = load_spine_vector(index, m + "gate.e_score_correction_bias", c.n_routed_experts);
    if (c.n_shared_experts > 0) {
      const int64_t w = c.moe_intermediate_size * c.n_shared_experts;
      const std::string s = m + "shared_experts.";
      L.shared = {load(s + "gate_proj", w, h), load(s + "up_proj", w, h), load(s + "down_proj", h, w)};
    }
  }
}

LatentKvCache K2Model::new_cache() const {
  return LatentKvCache(config_.num_hidden_layers, config_.kv_lora_rank, config_.qk_rope_head_dim);
}

void K2Model::attention(int64_t layer, LatentKvCache& cache, const float* normed, int64_t n, int64_t start,
                        float* out) {
  const ModelConfig& c = config_;
  const Layer& L = layers_[layer];
  const int64_t heads = c.num_attention_heads, qk = c.qk_head_dim(), lat = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  std::vector<float> q(n * heads * qk);  // [n, heads, nope + rope]
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(n * c.q_lora_rank);  // [n, q_lora]
    backend_.matmul(L.q_a.view, normed, n, qa.data());
    backend_.rmsnorm(qa.data(), L.q_a_norm.data(), n, c.q_lora_rank, kMlaNormEps, qa.data());
    backend_.matmul(L.q_b.view, qa.data(), n, q.data());
  } else {
    backend_.matmul(L.q_proj.view, normed, n, q.data());
  }
  std::vector<float> ckv(n * (lat + rope));  // [n, kv_lora + rope]
  backend_.matmul(L.kv_a.view, normed, n, ckv.data());
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = start + t;
    const float* row = ckv.data() + t * (lat + rope);
    backend_.rmsnorm(row, L.kv_a_norm.data(), 1, lat, kMlaNormEps, cache.c(layer, pos));
    std::copy(row + lat, row + lat + rope, cache.pe(layer, pos));
    rope_.apply(cache.pe(layer, pos), pos);
    for (int64_t hd = 0; hd < heads; ++hd) rope_.apply(q.data() + (t * heads + hd) * qk + c.qk_nope_head_dim, pos);
  }
  const cpu::MlaShape shape{heads, c.qk_nope_head_dim, rope, c.v_head_dim, lat, c.softmax_scale()};
  std::vector<float> attn(n * heads * c.v_head_dim);  // [n, heads * v]
  for (int64_t t = 0; t < n; ++t)
    backend_.mla_attention(shape, L.kv_b.view, q.data() + t * heads * qk, cache.c(layer, 0), cache.pe(layer, 0),
                           start + t + 1, attn.data() + t * heads * c.v_head_dim);
  backend_.matmul(L.o_proj.view, attn.data(), n, out);
}

void K2Model::dense_mlp(const Mlp& mlp, const float* normed, int64_t n, float* out) {
  const int64_t width = mlp.gate.view.rows;
  std::vector<float> gate(n * width), up(n * width);  // [n, width]
  backend_.matmul(mlp.gate.view, normed, n, gate.data());
  backend_.matmul(mlp.up.view, normed, n, up.data());
  backend_.silu_mul(gate.data(), up.data(), n * width);
  backend_.matmul(mlp.down.view, gate.data(), n, out);
}

RouterSpec K2Model::router_spec() const {
  const ModelConfig& c = config_;
  return {c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling_factor};
}

void K2Model::moe(int64_t layer, const float* normed, int64_t n, int64_t start, float* out) {
  const ModelConfig& c = config_;
  const Layer& L = layers_[layer];
  const int64_t h = c.hidden_size;
  std::vector<float> logits(n * c.n_routed_experts);  // [n, experts], fp32
  backend_.matmul(L.router.view, normed, n, logits.data());
  const RouterSpec router = router_spec();
  const RoutedPlan plan = plan_routed_experts(experts_, layer, router, logits.data(),
                                              L.router_bias.empty() ? nullptr : L.router_bias.data(), n, start, stats_);
  if (lookahead_.active() && layer + 1 < c.num_hidden_layers && layers_[layer + 1].moe) {
    const Layer& next = layers_[layer + 1];
    backend_.matmul(next.router.view, normed, n, logits.data());
    lookahead_.guess(experts_, layer + 1, router, logits.data(), next.router_bias.empty() ? nullptr : next.router_bias.data(), n);
  }
  if (c.n_shared_experts > 0) dense_mlp(L.shared, normed, n, out);  // while the routed experts are read
  std::vector<float> routed(n * h);  // [n, hidden]
  run_routed_experts(backend_, experts_, plan, normed, n, h, c.moe_intermediate_size,
                     [](Backend& b, float* gate, const float* up, int64_t m) { b.silu_mul(gate, up, m); },
                     routed.data());
  if (c.n_shared_experts > 0) {
    for (int64_t i = 0; i < n * h; ++i) out[i] += routed[i];
  } else {
    std::copy(routed.begin(), routed.end(), out);
  }
}

void K2Model::forward(LatentKvCache& cache, const int32_t* tokens, int64_t n, int64_t start, float* logits,
                      bool all_logits, const LayerObserver& observer) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) fail("token id {} is outside the vocabulary (0..{})", tokens[t], c.vocab_size - 1);
  cache.reserve(start + n);
  experts_.begin_pass();
  lookahead_.begin_pass(experts_);
  std::vector<float> x(n * h), normed(n * h), delta(n * h);  // [n, hidden]
  for (int64_t t = 0; t < n; ++t) backend_.embed(embed_.view, tokens[t], x.data() + t * h);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (observer) observer(l, x.data(), n);
    const Layer& L = layers_[l];
    backend_.rmsnorm(x.data(), L.input_norm.data(), n, h, c.rms_norm_eps, normed.data());
    attention(l, cache, normed.data(), n, start, delta.data());
    for (int64_t i = 0; i < n * h; ++i) x[i] += delta[i];
    backend_.rmsnorm(x.data(), L.post_attention_norm.data(), n, h, c.rms_norm_eps, normed.data());
    if (L.moe) moe(l, normed.data(), n, start, delta.data());
    else dense_mlp(L.mlp, normed.data(), n, delta.data());
    for (int64_t i = 0; i < n * h; ++i) x[i] += delta[i];
  }
  backend_.rmsnorm(x.data(), final_norm_.data(), n, h, c.rms_norm_eps, normed.data());
  if (observer) observer(c.num_hidden_layers, normed.data(), n);
  const int64_t first = all_logits ? 0 : n - 1;
  backend_.matmul(lm_head_.view, normed.data() + first * h, n - first, logits);
  ++stats_.passes;
  stats_.positions += n;
}

}  // namespace deltafin
