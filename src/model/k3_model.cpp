// K3Model: spine loading and the forward pass (see k3_model.hpp).
#include "model/k3_model.hpp"

#include <fmt/format.h>

#include <cmath>

#include "model/family.hpp"
#include "model/state_bytes.hpp"
#include "model/stream_wait.hpp"

namespace deltafin {
namespace {

constexpr float kMlaNormEps = 1e-6f;  // q_a_layernorm / kv_a_layernorm: class default in the release
constexpr float kL2NormEps = 1e-6f;   // KDA q/k l2 normalisation: x / sqrt(sum x^2 + eps)

}  // namespace

ExpertTable k3_expert_table(const WeightIndex& index, const K3Config& c) {
  static const char* const kNames[3] = {"w1", "w3", "w2"};  // gate, up, down
  return ExpertTable(
      index, c.num_hidden_layers, c.num_experts, [&](int64_t l) { return c.is_moe_layer(l); },
      [](int64_t l, int64_t e, int p) { return fmt::format("model.layers.{}.block_sparse_moe.experts.{}.{}", l, e, kNames[p]); },
      {{{c.moe_intermediate_size, c.latent_size}, {c.moe_intermediate_size, c.latent_size},
        {c.latent_size, c.moe_intermediate_size}}});
}

// The folded Attention-Residuals query of a site: norm weight x projection, in fp32.
SpineVector K3Model::res_query(SpineLoader& load, const std::string& prefix) {
  const int64_t h = config_.hidden_size;
  std::vector<float> w = load.floats(prefix + "_norm.weight", {{h}});
  const std::vector<float> proj = load.floats(prefix + "_proj.weight", {{1, h}, {h}});
  for (int64_t d = 0; d < h; ++d) w[d] *= proj[d];
  return load.upload(w);
}

void K3Model::load_kda(SpineLoader& load, const std::string& p, Kda& w) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size, heads = c.kda_heads, hd = c.kda_head_dim, ch = heads * hd, taps = c.conv_kernel;
  w.q = load.matrix(p + "q_proj", ch, h);
  w.k = load.matrix(p + "k_proj", ch, h);
  w.v = load.matrix(p + "v_proj", ch, h);
  w.f_a = load.matrix(p + "f_a_proj", hd, h);
  w.f_b = load.matrix(p + "f_b_proj", ch, hd);
  w.b = load.matrix(p + "b_proj", heads, h);
  w.g = load.matrix(p + "g_proj", ch, h);
  w.o = load.matrix(p + "o_proj", h, ch);
  w.conv_q = load.upload(load.floats(p + "q_conv1d.weight", {{ch, 1, taps}, {ch, taps}}));
  w.conv_k = load.upload(load.floats(p + "k_conv1d.weight", {{ch, 1, taps}, {ch, taps}}));
  w.conv_v = load.upload(load.floats(p + "v_conv1d.weight", {{ch, 1, taps}, {ch, taps}}));
  w.dt_bias = load.upload(load.floats(p + "dt_bias", {{ch}, {heads, hd}}));
  // A_log: one per head; the release pads it with zeros to a multiple of 128.
  const std::vector<float> a_log = load.floats(p + "A_log", {{heads}, {(heads + 127) / 128 * 128}, {1, 1, heads, 1}});
  std::vector<float> rate(heads);
  for (int64_t i = 0; i < heads; ++i) rate[i] = std::exp(a_log[i]);
  w.decay_rate = load.upload(rate);
  w.o_norm = load.vector(p + "o_norm.weight", hd);
}

void K3Model::load_moe(SpineLoader& load, const std::string& p, Moe& w) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size, lat = c.latent_size;
  w.router = load.matrix(p + "gate", c.num_experts, h);
  if (load.index().find(p + "gate.e_score_correction_bias"))
    w.router_bias = load.vector(p + "gate.e_score_correction_bias", c.num_experts);
  w.down_latent = load.matrix(p + "routed_expert_down_proj", lat, h);
  w.up_latent = load.matrix(p + "routed_expert_up_proj", h, lat);
  if (c.latent_norm) w.latent_norm = load.vector(p + "routed_expert_norm.weight", lat);
  if (c.num_shared_experts > 0) w.shared = load_mlp(load, p + "shared_experts.", c.moe_intermediate_size * c.num_shared_experts, h);
}

K3Model::K3Model(const WeightIndex& index, const K3Config& config, Backend& backend, ExpertStore& experts,
                 SpineStream* stream)
    : config_(config), backend_(backend), experts_(experts), local_experts_(backend, experts), scratch_(backend), stream_(stream) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  SpineLoader load(backend, index, stream);
  // No RoPE: the "rope" dims are a shared, unrotated key part.
  mla_ = {{c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank,
           1.0f / std::sqrt(static_cast<float>(qk))},
          h, c.q_lora_rank, kMlaNormEps, c.mla_output_gate, nullptr, 1.0f};
  router_spec_ = {c.num_experts, c.num_experts_per_token, 1, 1, c.renormalize && c.num_experts_per_token > 1,
                  c.routed_scaling_factor};
  situ_ = {GatedActivation::kSiTU, c.situ_beta, c.situ_linear_beta};
  load.begin_unit(0);
  embed_ = load.matrix("model.embed_tokens", c.vocab_size, h);
  load.begin_unit(c.num_hidden_layers + 1);
  lm_head_ = load.matrix(c.tie_word_embeddings && !index.find("lm_head.weight") ? "model.embed_tokens" : "lm_head", c.vocab_size, h);
  final_norm_ = load.vector("model.norm.weight", h);
  output_res_query_ = res_query(load, "model.output_attn_res");
  layers_.resize(c.num_hidden_layers);
  const int64_t ch = c.kda_heads * c.kda_head_dim;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    const std::string p = fmt::format("model.layers.{}.", l);
    load.begin_unit(l + 1);
    L.input_norm = load.vector(p + "input_layernorm.weight", h);
    L.post_attention_norm = load.vector(p + "post_attention_layernorm.weight", h);
    L.attn_res_query = res_query(load, p + "self_attention_res");
    L.mlp_res_query = res_query(load, p + "mlp_res");
    L.mla = c.is_mla[l];
    if (L.mla) {
      L.mla_weights = load_mla(load, p + "self_attn.", mla_);
    } else {
      load_kda(load, p + "self_attn.", L.kda);
      L.recurrent_offset = recurrent_bytes_;
      recurrent_bytes_ += 4 * static_cast<uint64_t>(ch * c.kda_head_dim + 3 * (c.conv_kernel - 1) * ch);
    }
    L.moe = c.is_moe_layer(l);
    if (L.moe) load_moe(load, p + "block_sparse_moe.", L.moe_weights);
    else L.dense = load_mlp(load, p + "mlp.", c.intermediate_size, h);
  }
  spine_bytes_ = load.bytes();
}

K3State K3Model::new_state() const {
  const K3Config& c = config_;
  K3State s{LatentKvCache(backend_, c.num_hidden_layers, c.kv_lora_rank, c.qk_rope_head_dim, c.is_mla),
            backend_.allocate(recurrent_bytes_), drafter_ ? drafter_->new_state() : nullptr};
  restore_recurrent(s, nullptr);
  return s;
}

BlockDraft K3Model::draft_block(K3State& state, int32_t anchor, int64_t pos, int k, const ChooseGuess& choose) {
  if (!drafter_ || !state.draft) return {};
  return drafter_->draft(*state.draft, anchor, pos, k, choose);
}

std::unique_ptr<Buffer> K3Model::save_recurrent(const K3State& state) const {
  std::unique_ptr<Buffer> copy = backend_.allocate(recurrent_bytes_);
  const int64_t floats = static_cast<int64_t>(recurrent_bytes_ / 4);
  backend_.copy(Tensor::of(*state.recurrent, 1, floats), Tensor::of(*copy, 1, floats));
  return copy;
}

void K3Model::restore_recurrent(K3State& state, const Buffer* saved) const {
  const Tensor all = Tensor::of(*state.recurrent, 1, static_cast<int64_t>(recurrent_bytes_ / 4));
  if (saved) backend_.copy(Tensor::of(const_cast<Buffer&>(*saved), 1, all.cols), all);
  else backend_.fill(all, 0.0f);
}

namespace {
StateLayout k3_layout(const K3State& state, int64_t positions, uint64_t recurrent_bytes) {
  std::vector<int64_t> dims = state.mla.dims();
  dims.push_back(static_cast<int64_t>(recurrent_bytes));
  return {kK3StateFamily, std::move(dims), positions, static_cast<uint64_t>(positions) * state.mla.position_bytes() + recurrent_bytes};
}
}  // namespace

std::vector<std::byte> K3Model::save_state(const K3State& state, int64_t positions) const {
  std::vector<std::byte> out = state_bytes_head(k3_layout(state, positions, recurrent_bytes_));
  state.mla.save_rows(positions, out);
  const size_t at = out.size();
  out.resize(at + recurrent_bytes_);
  if (recurrent_bytes_ > 0)
    backend_.download(Tensor::of(*state.recurrent, 1, static_cast<int64_t>(recurrent_bytes_ / 4)), out.data() + at);
  return out;
}

void K3Model::load_state(K3State& state, int64_t positions, std::span<const std::byte> bytes) const {
  const std::span<const std::byte> payload = state_bytes_payload(bytes, k3_layout(state, positions, recurrent_bytes_));
  const uint64_t rows = payload.size() - recurrent_bytes_;
  state.mla.load_rows(positions, payload.data());
  if (recurrent_bytes_ > 0) backend_.upload(payload.data() + rows, *state.recurrent, 0, recurrent_bytes_);
  if (state.draft) state.draft->forget();  // no pass covered these positions: the drafter has no context
}

void K3Model::kda(int64_t layer, K3State& state, const Tensor& x, const Tensor& out) {
  const K3Config& c = config_;
  const Layer& L = layers_[layer];
  const Kda& w = L.kda;
  const int64_t n = x.rows, heads = c.kda_heads, hd = c.kda_head_dim, ch = heads * hd, taps = c.conv_kernel;
  KdaArgs a;
  a.heads = heads, a.head_dim = hd, a.taps = taps, a.gate_lower_bound = c.gate_lower_bound, a.norm_eps = kL2NormEps;
  a.q = scratch_.take(n, ch), a.k = scratch_.take(n, ch), a.v = scratch_.take(n, ch);  // [n, heads * head_dim]
  a.beta = scratch_.take(n, heads);
  a.decay = scratch_.take(n, ch);
  const Tensor low_rank = scratch_.take(n, hd), gate = scratch_.take(n, ch);
  backend_.matmul(w.q.weight, x, a.q);
  backend_.matmul(w.k.weight, x, a.k);
  backend_.matmul(w.v.weight, x, a.v);
  backend_.matmul(w.b.weight, x, a.beta);
  backend_.matmul(w.f_a.weight, x, low_rank);
  backend_.matmul(w.f_b.weight, low_rank, a.decay);
  backend_.matmul(w.g.weight, x, gate);
  a.conv_q = w.conv_q.tensor, a.conv_k = w.conv_k.tensor, a.conv_v = w.conv_v.tensor;
  a.dt_bias = w.dt_bias.tensor, a.decay_rate = w.decay_rate.tensor;
  a.state = Tensor::of(*state.recurrent, ch, hd, Elem::F32, L.recurrent_offset);
  a.window = Tensor::of(*state.recurrent, 3 * (taps - 1), ch, Elem::F32, L.recurrent_offset + 4 * static_cast<uint64_t>(ch * hd));
  a.out = scratch_.take(n, ch);
  backend_.kda(a);
  // Per-head RMSNorm (weight shared by heads), then the sigmoid output gate.
  backend_.rmsnorm(a.out.reshaped(n * heads, hd), w.o_norm.tensor, c.rms_norm_eps, a.out.reshaped(n * heads, hd));
  backend_.mul_sigmoid(a.out, gate, a.out);
  backend_.matmul(w.o.weight, a.out, out);
}

void K3Model::moe(int64_t layer, const Tensor& x, int64_t start, const Tensor& out) {
  const K3Config& c = config_;
  const Moe& w = layers_[layer].moe_weights;
  const int64_t n = x.rows, h = c.hidden_size, lat = c.latent_size;
  const Tensor z = scratch_.take(n, lat), routed = scratch_.take(n, lat), up = scratch_.take(n, h);
  // The next layer's router guesses only when it is resident (a streamed one is still being read).
  const bool next_moe = layer + 1 < c.num_hidden_layers && layers_[layer + 1].moe && !(stream_ && stream_->streamed(layer + 2));
  const RouterWeights next = next_moe ? router(layer + 1) : RouterWeights{};
  const Routing routing = route_and_request(backend_, scratch_, *producer_, experts_, router_spec_, router(layer), layer, x, start, stats_,
                                            lookahead_, next_moe ? &next : nullptr);
  if (recorder_) recorder_->layer(layer, routing.chosen);
  backend_.matmul(w.down_latent.weight, x, z);
  if (c.num_shared_experts > 0) run_mlp(backend_, scratch_, w.shared, situ_, x, out);  // while the routed experts are read
  run_routed(backend_, scratch_, *producer_, routing, z, c.moe_intermediate_size, situ_, routed);
  if (c.latent_norm) backend_.rmsnorm(routed, w.latent_norm.tensor, c.rms_norm_eps, routed);
  backend_.matmul(w.up_latent.weight, routed, up);
  if (c.num_shared_experts > 0) backend_.add(up, out, out);
  else backend_.copy(up, out);
}

void K3Model::mix(const std::vector<Tensor>& blocks, size_t sealed, const Tensor& partial, const Tensor& query,
                  const Tensor& out) {
  std::vector<Tensor> candidates(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(sealed));
  candidates.push_back(partial);
  backend_.attn_res_mix(candidates, query, config_.rms_norm_eps, out);
}

void K3Model::forward(K3State& state, const int32_t* tokens, int64_t n, int64_t start, float* logits, bool all_logits,
                      const K3Observer& observer) {
  const K3Config& c = config_;
  const int64_t h = c.hidden_size;
  state.mla.reserve(start + n);
  experts_.begin_pass();
  lookahead_.begin_pass(experts_);
  if (recorder_) recorder_->pass(start, n);
  scratch_.reset();
  std::vector<float> seen;  // observer copies [n, hidden]
  const auto observe = [&](int64_t row, const Tensor& t) {
    if (!observer) return;
    seen.resize(n * h);
    backend_.download(t, seen.data());
    observer(row, seen.data(), n);
  };
  const Tensor ids = upload_tokens(backend_, scratch_, tokens, n, c.vocab_size);
  // Attention Residuals: `blocks` are the sealed snapshots, `partial` the running block sum.
  std::vector<Tensor> blocks((c.num_hidden_layers + c.attn_res_block_size - 1) / c.attn_res_block_size);
  for (Tensor& b : blocks) b = scratch_.take(n, h);
  size_t sealed = 0;
  const Tensor partial = scratch_.take(n, h), mixed = scratch_.take(n, h), normed = scratch_.take(n, h),
               delta = scratch_.take(n, h);  // [n, hidden]
  // A drafter's rows: the outputs of its target layers, side by side [n, layers * hidden].
  const std::vector<int64_t>* captured = drafter_ && state.draft ? &drafter_->target_layers() : nullptr;
  const Tensor capture = captured ? scratch_.take(n, h * static_cast<int64_t>(captured->size())) : Tensor{};
  enter_unit(stream_, 0, stats_);
  backend_.embed(embed_.weight, ids, partial);
  observe(0, partial);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    enter_unit(stream_, l + 1, stats_);
    const Layer& L = layers_[l];
    const Scratch::Mark frame = scratch_.mark();
    // 1. The attention input: a mix over the snapshots and the running sum (layer 0: the embedding).
    if (sealed == 0) backend_.copy(partial, mixed);
    else mix(blocks, sealed, partial, L.attn_res_query.tensor, mixed);
    // 2. Every attn_res_block_size layers the running sum is sealed and a new block starts.
    const bool seal = l % c.attn_res_block_size == 0;
    if (seal) backend_.copy(partial, blocks[sealed++]);
    // 3. Attention on the normed mix; its output starts or extends the running sum.
    backend_.rmsnorm(mixed, L.input_norm.tensor, c.rms_norm_eps, normed);
    if (L.mla) run_mla(backend_, scratch_, mla_, L.mla_weights, state.mla, l, normed, start, delta);
    else kda(l, state, normed, delta);
    if (seal) backend_.copy(delta, partial);
    else backend_.add(partial, delta, partial);
    // 4. The MLP input: a mix over the snapshots and the running sum; its output extends the sum.
    mix(blocks, sealed, partial, L.mlp_res_query.tensor, mixed);
    backend_.rmsnorm(mixed, L.post_attention_norm.tensor, c.rms_norm_eps, normed);
    if (L.moe) moe(l, normed, start, delta);
    else run_mlp(backend_, scratch_, L.dense, situ_, normed, delta);
    backend_.add(partial, delta, partial);
    observe(l + 1, partial);
    if (captured)
      for (size_t j = 0; j < captured->size(); ++j)
        if ((*captured)[j] == l) backend_.copy(partial, capture.col_range(static_cast<int64_t>(j) * h, h));
    scratch_.release(frame);
  }
  enter_unit(stream_, c.num_hidden_layers + 1, stats_);
  mix(blocks, sealed, partial, output_res_query_.tensor, mixed);
  observe(c.num_hidden_layers + 1, mixed);
  backend_.rmsnorm(mixed, final_norm_.tensor, c.rms_norm_eps, normed);
  observe(c.num_hidden_layers + 2, normed);
  project_logits(backend_, scratch_, lm_head_.weight, normed, all_logits, logits);
  if (captured) drafter_->add_context(*state.draft, capture, tokens, start);
  ++stats_.passes;
  stats_.positions += n;
  stats_.scratch_peak = scratch_.peak();
}

// --- the family -------------------------------------------------------------------------------

namespace {

FamilyDescription describe_k3(const std::string& path) {
  const K3Config c = load_k3_config(path);
  FamilyDescription d{{}, k3_bytes_from_config(c), c.num_hidden_layers, 0, c.num_experts, c.num_experts_per_token,
                      c.max_position_embeddings};
  d.expert_input = c.latent_size;
  int64_t mla = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) mla += c.is_mla[l], d.moe_layers += c.is_moe_layer(l);
  d.lines.push_back("architecture   Kimi K3 (KDA + gated MLA hybrid, attention residuals, latent MoE)");
  d.lines.push_back(fmt::format("layers         {} ({} KDA, {} gated MLA; {} dense, {} MoE), hidden {}, vocab {}",
                                c.num_hidden_layers, c.num_hidden_layers - mla, mla, c.num_hidden_layers - d.moe_layers,
                                d.moe_layers, c.hidden_size, c.vocab_size));
  d.lines.push_back(fmt::format("attention      KDA {} heads x {}, conv {}, gate bound {}; MLA {} heads, q_lora {}, kv_lora {}, no RoPE",
                                c.kda_heads, c.kda_head_dim, c.conv_kernel, c.gate_lower_bound, c.num_attention_heads,
                                c.q_lora_rank, c.kv_lora_rank));
  d.lines.push_back(fmt::format("residuals      attention residuals, blocks of {} layers", c.attn_res_block_size));
  d.lines.push_back(fmt::format("experts        {} routed per MoE layer, top-{}, latent {}, width {}, {} shared{}",
                                c.num_experts, c.num_experts_per_token, c.latent_size, c.moe_intermediate_size,
                                c.num_shared_experts, c.mxfp4_experts ? ", MXFP4" : ""));
  return d;
}

}  // namespace

const Family kKimiK3Family = {
    "kimi_k3",
    [](std::string_view outer, std::string_view text) {
      return outer == "kimi_k3" || (text.empty() ? outer : text) == "kimi_linear";
    },
    describe_k3,
    [](const std::string& path, const WeightIndex& index) { return k3_expert_table(index, load_k3_config(path)); },
};

}  // namespace deltafin
