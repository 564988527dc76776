// K3Model: spine loading and the forward pass (see k3_model.hpp).
#include "model/k3_model.hpp"

#include <fmt/format.h>

#include <cmath>

#include "util/error.hpp"

namespace deltafin {
namespace {

constexpr float kMlaNormEps = 1e-6f;  // q_a_layernorm / kv_a_layernorm: class default in the release
constexpr float kL2NormEps = 1e-6f;   // KDA q/k l2 normalisation: x / sqrt(sum x^2 + eps)

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// x [dim] /= sqrt(sum x^2 + eps), times scale.
void l2_normalise(float* x, int64_t dim, float scale) {
  float sum = 0.0f;
  for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float inv = scale / std::sqrt(sum + kL2NormEps);
  for (int64_t i = 0; i < dim; ++i) x[i] *= inv;
}

}  // namespace

ExpertTable k3_expert_table(const WeightIndex& index, const K3Config& c) {
  static const char* const kNames[3] = {"w1", "w3", "w2"};  // gate, up, down
  return ExpertTable(
      index, c.num_hidden_layers, c.num_experts, [&](int64_t l) { return c.is_moe_layer(l); },
      [](int64_t l, int64_t e, int p) { return fmt::format("model.layers.{}.block_sparse_moe.experts.{}.{}", l, e, kNames[p]); },
      {{{c.moe_intermediate_size, c.latent_size}, {c.moe_intermediate_size, c.latent_size},
        {c.latent_size, c.moe_intermediate_size}}});
}

SpineMatrix K3Model::load(const std::string& name, int64_t rows, int64_t cols) {
  SpineMatrix m = load_spine_matrix(index_, name, rows, cols);
  spine_bytes_ += m.bytes();
  return m;
}

// The folded Attention-Residuals query of a site: norm weight x projection, in fp32.
std::vector<float> K3Model::res_query(const std::string& prefix) {
  const int64_t h = config_.hidden_size;
  std::vector<float> w = load_spine_vector(index_, prefix + "_norm.weight", h);
  const std::vector<float> proj = load_spine_floats(index_, prefix + "_proj.weight", {{1, h}, {h}});
  for (int64_t d = 0; d < h; ++d) w[d] *= proj[d];
  spine_bytes_ += 4 * h;
  return w;
}

void K3Model::load_kda(const std::string& p, Kda& w) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size, heads = c.kda_heads, hd = c.kda_head_dim, ch = heads * hd, taps = c.conv_kernel;
  w.q = load(p + "q_proj", ch, h);
  w.k = load(p + "k_proj", ch, h);
  w.v = load(p + "v_proj", ch, h);
  w.f_a = load(p + "f_a_proj", hd, h);
  w.f_b = load(p + "f_b_proj", ch, hd);
  w.b = load(p + "b_proj", heads, h);
  w.g = load(p + "g_proj", ch, h);
  w.o = load(p + "o_proj", h, ch);
  w.conv_q = load_spine_floats(index_, p + "q_conv1d.weight", {{ch, 1, taps}, {ch, taps}});
  w.conv_k = load_spine_floats(index_, p + "k_conv1d.weight", {{ch, 1, taps}, {ch, taps}});
  w.conv_v = load_spine_floats(index_, p + "v_conv1d.weight", {{ch, 1, taps}, {ch, taps}});
  w.dt_bias = load_spine_floats(index_, p + "dt_bias", {{ch}, {heads, hd}});
  // A_log: one per head; the release pads it with zeros to a multiple of 128.
  std::vector<float> a_log = load_spine_floats(index_, p + "A_log", {{heads}, {(heads + 127) / 128 * 128}, {1, 1, heads, 1}});
  w.decay_rate.resize(heads);
  for (int64_t i = 0; i < heads; ++i) w.decay_rate[i] = std::exp(a_log[i]);
  w.o_norm = load_spine_vector(index_, p + "o_norm.weight", hd);
  spine_bytes_ += 4 * (3 * ch * taps + ch + heads + hd);
}

void K3Model::load_mla(const std::string& p, Mla& w) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size, heads = c.num_attention_heads;
  w.q_a = load(p + "q_a_proj", c.q_lora_rank, h);
  w.q_a_norm = load_spine_vector(index_, p + "q_a_layernorm.weight", c.q_lora_rank);
  w.q_b = load(p + "q_b_proj", heads * (c.qk_nope_head_dim + c.qk_rope_head_dim), c.q_lora_rank);
  w.kv_a = load(p + "kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, h);
  w.kv_a_norm = load_spine_vector(index_, p + "kv_a_layernorm.weight", c.kv_lora_rank);
  w.kv_b = load(p + "kv_b_proj", heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
  if (c.mla_output_gate) w.g = load(p + "g_proj", heads * c.v_head_dim, h);
  w.o = load(p + "o_proj", h, heads * c.v_head_dim);
}

void K3Model::load_moe(const std::string& p, Moe& w) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size, lat = c.latent_size;
  w.router = load(p + "gate", c.num_experts, h);
  if (index_.find(p + "gate.e_score_correction_bias"))
    w.router_bias = load_spine_vector(index_, p + "gate.e_score_correction_bias", c.num_experts);
  w.down_latent = load(p + "routed_expert_down_proj", lat, h);
  w.up_latent = load(p + "routed_expert_up_proj", h, lat);
  if (c.latent_norm) w.latent_norm = load_spine_vector(index_, p + "routed_expert_norm.weight", lat);
  if (c.num_shared_experts > 0) {
    const int64_t width = c.moe_intermediate_size * c.num_shared_experts;
    const std::string s = p + "shared_experts.";
    w.shared = {load(s + "gate_proj", width, h), load(s + "up_proj", width, h), load(s + "down_proj", h, width)};
  }
}

K3Model::K3Model(const WeightIndex& index, const K3Config& config, Backend& backend, ExpertStore& experts)
    : config_(config), index_(index), backend_(backend), experts_(experts) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size;
  embed_ = load("model.embed_tokens", c.vocab_size, h);
  lm_head_ = c.tie_word_embeddings && !index.find("lm_head.weight") ? load("model.embed_tokens", c.vocab_size, h)
                                                                     : load("lm_head", c.vocab_size, h);
  final_norm_ = load_spine_vector(index, "model.norm.weight", h);
  output_res_query_ = res_query("model.output_attn_res");
  layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    const std::string p = fmt::format("model.layers.{}.", l);
    L.input_norm = load_spine_vector(index, p + "input_layernorm.weight", h);
    L.post_attention_norm = load_spine_vector(index, p + "post_attention_layernorm.weight", h);
    L.attn_res_query = res_query(p + "self_attention_res");
    L.mlp_res_query = res_query(p + "mlp_res");
    L.mla = c.is_mla[l];
    if (L.mla) load_mla(p + "self_attn.", L.mla_weights);
    else load_kda(p + "self_attn.", L.kda);
    L.moe = c.is_moe_layer(l);
    if (L.moe) load_moe(p + "block_sparse_moe.", L.moe_weights);
    else L.dense = {load(p + "mlp.gate_proj", c.intermediate_size, h), load(p + "mlp.up_proj", c.intermediate_size, h),
                    load(p + "mlp.down_proj", h, c.intermediate_size)};
  }
}

K3State K3Model::new_state() const {
  const K3Config& c = config_;
  const int64_t ch = c.kda_heads * c.kda_head_dim;
  K3State s{std::vector<std::vector<float>>(c.num_hidden_layers), std::vector<std::vector<float>>(c.num_hidden_layers),
            LatentKvCache(c.num_hidden_layers, c.kv_lora_rank, c.qk_rope_head_dim, c.is_mla)};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_mla[l]) continue;
    s.kda_state[l].assign(c.kda_heads * c.kda_head_dim * c.kda_head_dim, 0.0f);
    s.conv[l].assign(3 * (c.conv_kernel - 1) * ch, 0.0f);
  }
  return s;
}

void K3Model::kda(int64_t layer, K3State& state, const float* x, int64_t n, float* out) {
  const K3Config& c = config_;
  const Kda& w = layers_[layer].kda;
  const int64_t heads = c.kda_heads, hd = c.kda_head_dim, ch = heads * hd, taps = c.conv_kernel;
  std::vector<float> u(n * ch), q(n * ch), k(n * ch), v(n * ch);  // [n, heads * head_dim]
  float* window = state.conv[layer].data();                       // [3][taps - 1][ch]
  const int64_t window_size = (taps - 1) * ch;
  backend_.matmul(w.q.view, x, n, u.data());
  backend_.short_conv_silu(w.conv_q.data(), window, u.data(), n, ch, taps, q.data());
  backend_.matmul(w.k.view, x, n, u.data());
  backend_.short_conv_silu(w.conv_k.data(), window + window_size, u.data(), n, ch, taps, k.data());
  backend_.matmul(w.v.view, x, n, u.data());
  backend_.short_conv_silu(w.conv_v.data(), window + 2 * window_size, u.data(), n, ch, taps, v.data());

  std::vector<float> beta(n * heads), low_rank(n * hd), decay(n * ch), gate(n * ch), o(n * ch);
  backend_.matmul(w.b.view, x, n, beta.data());
  backend_.matmul(w.f_a.view, x, n, low_rank.data());
  backend_.matmul(w.f_b.view, low_rank.data(), n, decay.data());
  backend_.matmul(w.g.view, x, n, gate.data());
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t hh = 0; hh < heads; ++hh) {
      l2_normalise(q.data() + t * ch + hh * hd, hd, q_scale);
      l2_normalise(k.data() + t * ch + hh * hd, hd, 1.0f);
      beta[t * heads + hh] = sigmoid(beta[t * heads + hh]);
      for (int64_t i = 0; i < hd; ++i) {  // alpha = exp(lower_bound * sigmoid(exp(A_log) * (z + dt_bias)))
        float& a = decay[t * ch + hh * hd + i];
        a = std::exp(c.gate_lower_bound * sigmoid(w.decay_rate[hh] * (a + w.dt_bias[hh * hd + i])));
      }
    }
    backend_.kda_step(state.kda_state[layer].data(), q.data() + t * ch, k.data() + t * ch, v.data() + t * ch,
                      decay.data() + t * ch, beta.data() + t * heads, heads, hd, hd, o.data() + t * ch);
  }
  // Per-head RMSNorm (weight shared by heads), then the sigmoid output gate.
  backend_.rmsnorm(o.data(), w.o_norm.data(), n * heads, hd, c.rms_norm_eps, o.data());
  for (int64_t i = 0; i < n * ch; ++i) o[i] *= sigmoid(gate[i]);
  backend_.matmul(w.o.view, o.data(), n, out);
}

void K3Model::mla(int64_t layer, K3State& state, const float* x, int64_t n, int64_t start, float* out) {
  const K3Config& c = config_;
  const Mla& w = layers_[layer].mla_weights;
  const int64_t heads = c.num_attention_heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  const int64_t lat = c.kv_lora_rank, rope = c.qk_rope_head_dim, vd = c.v_head_dim;
  std::vector<float> qa(n * c.q_lora_rank), q(n * heads * qk), ckv(n * (lat + rope));
  backend_.matmul(w.q_a.view, x, n, qa.data());
  backend_.rmsnorm(qa.data(), w.q_a_norm.data(), n, c.q_lora_rank, kMlaNormEps, qa.data());
  backend_.matmul(w.q_b.view, qa.data(), n, q.data());
  backend_.matmul(w.kv_a.view, x, n, ckv.data());
  LatentKvCache& cache = state.mla;
  for (int64_t t = 0; t < n; ++t) {  // no RoPE: the 64 "rope" dims are a shared, unrotated key part
    const float* row = ckv.data() + t * (lat + rope);
    backend_.rmsnorm(row, w.kv_a_norm.data(), 1, lat, kMlaNormEps, cache.c(layer, start + t));
    std::copy(row + lat, row + lat + rope, cache.pe(layer, start + t));
  }
  const cpu::MlaShape shape{heads, c.qk_nope_head_dim, rope, vd, lat, 1.0f / std::sqrt(static_cast<float>(qk))};
  std::vector<float> attn(n * heads * vd);
  for (int64_t t = 0; t < n; ++t)
    backend_.mla_attention(shape, w.kv_b.view, q.data() + t * heads * qk, cache.c(layer, 0), cache.pe(layer, 0),
                           start + t + 1, attn.data() + t * heads * vd);
  if (c.mla_output_gate) {
    std::vector<float> gate(n * heads * vd);
    backend_.matmul(w.g.view, x, n, gate.data());
    for (size_t i = 0; i < attn.size(); ++i) attn[i] *= sigmoid(gate[i]);
  }
  backend_.matmul(w.o.view, attn.data(), n, out);
}

void K3Model::mlp(const Mlp& w, const float* x, int64_t n, float* out) {
  const int64_t width = w.gate.view.rows;
  std::vector<float> gate(n * width), up(n * width);
  backend_.matmul(w.gate.view, x, n, gate.data());
  backend_.matmul(w.up.view, x, n, up.data());
  backend_.situ_mul(gate.data(), up.data(), n * width, config_.situ_beta, config_.situ_linear_beta);
  backend_.matmul(w.down.view, gate.data(), n, out);
}

void K3Model::moe(int64_t layer, const float* x, int64_t n, int64_t start, float* out) {
  const K3Config& c = config_;
  const Moe& w = layers_[layer].moe_weights;
  const int64_t h = c.hidden_size, lat = c.latent_size;
  std::vector<float> logits(n * c.num_experts), z(n * lat), routed(n * lat), up(n * h);
  backend_.matmul(w.router.view, x, n, logits.data());
  backend_.matmul(w.down_latent.view, x, n, z.data());
  const RouterSpec router{c.num_experts, c.num_experts_per_token, 1, 1,
                          c.renormalize && c.num_experts_per_token > 1, c.routed_scaling_factor};
  const float beta = c.situ_beta, linear_beta = c.situ_linear_beta;
  const RoutedPlan plan = plan_routed_experts(experts_, layer, router, logits.data(),
                                              w.router_bias.empty() ? nullptr : w.router_bias.data(), n, start, stats_);
  if (lookahead_.active() && layer + 1 < c.num_hidden_layers && layers_[layer + 1].moe) {
    const Moe& next = layers_[layer + 1].moe_weights;
    backend_.matmul(next.router.view, x, n, logits.data());
    lookahead_.guess(experts_, layer + 1, router, logits.data(), next.router_bias.empty() ? nullptr : next.router_bias.data(), n);
  }
  if (c.num_shared_experts > 0) mlp(w.shared, x, n, out);  // while the routed experts are read
  run_routed_experts(backend_, experts_, plan, z.data(), n, lat, c.moe_intermediate_size,
                     [beta, linear_beta](Backend& b, float* g, const float* u, int64_t m) { b.situ_mul(g, u, m, beta, linear_beta); },
                     routed.data());
  if (c.latent_norm) backend_.rmsnorm(routed.data(), w.latent_norm.data(), n, lat, c.rms_norm_eps, routed.data());
  backend_.matmul(w.up_latent.view, routed.data(), n, up.data());
  if (c.num_shared_experts > 0) {
    for (int64_t i = 0; i < n * h; ++i) out[i] = up[i] + out[i];
  } else {
    std::copy(up.begin(), up.end(), out);
  }
}

void K3Model::mix(const std::vector<std::vector<float>>& blocks, const std::vector<float>& partial, const float* query,
                  int64_t n, float* out) {
  const int64_t h = config_.hidden_size;
  std::vector<const float*> candidates(blocks.size() + 1);
  for (int64_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < blocks.size(); ++i) candidates[i] = blocks[i].data() + t * h;
    candidates.back() = partial.data() + t * h;
    backend_.attn_res_mix(candidates.data(), static_cast<int64_t>(candidates.size()), query, h, config_.rms_norm_eps,
                          out + t * h);
  }
}

void K3Model::forward(K3State& state, const int32_t* tokens, int64_t n, int64_t start, float* logits, bool all_logits,
                      const K3Observer& observer) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size;
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      fail("token id {} is outside the vocabulary (0..{})", tokens[t], c.vocab_size - 1);
  state.mla.reserve(start + n);
  experts_.begin_pass();
  lookahead_.begin_pass(experts_);
  // Attention Residuals: `blocks` are the sealed snapshots, `partial` the running block sum.
  std::vector<std::vector<float>> blocks;
  std::vector<float> partial(n * h), mixed(n * h), normed(n * h), delta(n * h);  // [n, hidden]
  for (int64_t t = 0; t < n; ++t) backend_.embed(embed_.view, tokens[t], partial.data() + t * h);
  if (observer) observer(0, partial.data(), n);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& L = layers_[l];
    // 1. The attention input: a mix over the snapshots and the running sum (layer 0: the embedding).
    if (blocks.empty()) mixed = partial;
    else mix(blocks, partial, L.attn_res_query.data(), n, mixed.data());
    // 2. Every attn_res_block_size layers the running sum is sealed and a new block starts.
    const bool seal = l % c.attn_res_block_size == 0;
    if (seal) blocks.push_back(partial);
    // 3. Attention on the normed mix; its output starts or extends the running sum.
    backend_.rmsnorm(mixed.data(), L.input_norm.data(), n, h, c.rms_norm_eps, normed.data());
    if (L.mla) mla(l, state, normed.data(), n, start, delta.data());
    else kda(l, state, normed.data(), n, delta.data());
    if (seal) partial = delta;
    else for (int64_t i = 0; i < n * h; ++i) partial[i] += delta[i];
    // 4. The MLP input: a mix over the snapshots and the running sum; its output extends the sum.
    mix(blocks, partial, L.mlp_res_query.data(), n, mixed.data());
    backend_.rmsnorm(mixed.data(), L.post_attention_norm.data(), n, h, c.rms_norm_eps, normed.data());
    if (L.moe) moe(l, normed.data(), n, start, delta.data());
    else mlp(L.dense, normed.data(), n, delta.data());
    for (int64_t i = 0; i < n * h; ++i) partial[i] += delta[i];
    if (observer) observer(l + 1, partial.data(), n);
  }
  mix(blocks, partial, output_res_query_.data(), n, mixed.data());
  if (observer) observer(c.num_hidden_layers + 1, mixed.data(), n);
  backend_.rmsnorm(mixed.data(), final_norm_.data(), n, h, c.rms_norm_eps, normed.data());
  if (observer) observer(c.num_hidden_layers + 2, normed.data(), n);
  const int64_t first = all_logits ? 0 : n - 1;
  backend_.matmul(lm_head_.view, normed.data() + first * h, n - first, logits);
  ++stats_.passes;
  stats_.positions += n;
}

}  // namespace deltafin
