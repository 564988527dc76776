// The EAGLE-3 head's passes (see eagle3_model.hpp).
#include "model/eagle3_model.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "model/rope.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {
namespace {

constexpr GatedActivation kSiLU{GatedActivation::kSiLU};

}  // namespace

Eagle3Model::Eagle3Model(const std::string& dir, const Eagle3Config& config, Backend& backend, const Weight& embed,
                         const Weight& lm_head)
    : config_(config), backend_(backend), scratch_(backend), embed_(&embed), lm_head_(&lm_head) {
  const Eagle3Config& c = config_;
  const ModelConfig& a = c.attention;
  const int64_t h = c.hidden_size, aux = static_cast<int64_t>(c.target_layers.size());
  const std::unique_ptr<WeightIndex> index = WeightIndex::open(dir, "fc.weight");
  SpineLoader load(backend, *index);
  const Rope rope(a);
  inv_freq_ = load.upload(rope.inv_freq());
  mla_ = {{a.num_attention_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.kv_lora_rank, a.softmax_scale()},
          h, a.q_lora_rank, c.rms_norm_eps, false, &inv_freq_.tensor, rope.attention_factor(), 2 * h};
  fc_ = load.matrix("fc", h, c.target_hidden_size * aux);
  if (c.fc_norm)
    for (int64_t j = 0; j < aux; ++j) fc_norm_.push_back(load.vector(fmt::format("fc_norm.{}.weight", j), c.target_hidden_size));
  // vLLM loads the layer from midlayer.* (renamed layers.0.*) or layers.0.*.
  const std::string p = index->find("midlayer.input_layernorm.weight") ? "midlayer." : "layers.0.";
  input_norm_ = load.vector(p + "input_layernorm.weight", h);
  hidden_norm_ = load.vector(p + "hidden_norm.weight", h);
  post_attention_norm_ = load.vector(p + "post_attention_layernorm.weight", h);
  attention_ = load_mla(load, p + "self_attn.", mla_);
  mlp_ = load_mlp(load, p + "mlp.", c.intermediate_size, h);
  final_norm_ = load.vector("norm.weight", h);
  // Its own lm_head and embedding when the checkpoint has them, else the target's (as vLLM shares them).
  if (index->find("lm_head.weight")) {
    own_lm_head_ = load.matrix("lm_head", c.vocab_size, h);
    lm_head_ = &own_lm_head_.weight;
  }
  if (index->find("embed_tokens.weight")) {
    own_embed_ = load.matrix("embed_tokens", c.vocab_size, h);
    embed_ = &own_embed_.weight;
  }
  bytes_ = load.bytes();
}

std::unique_ptr<DrafterState> Eagle3Model::new_state() const {
  const ModelConfig& a = config_.attention;
  return std::make_unique<Eagle3State>(LatentKvCache(backend_, 2, a.kv_lora_rank, a.qk_rope_head_dim));
}

void Eagle3Model::kv_half(const Tensor& x, int half, const Tensor& out) {
  const int64_t h = config_.hidden_size;
  const Scratch::Mark frame = scratch_.mark();
  const Tensor wide = scratch_.take(x.rows, 2 * h);
  backend_.fill(wide, 0.0f);
  backend_.copy(x, wide.col_range(half * h, h));
  backend_.matmul(attention_.kv_a.weight, wide, out);
  scratch_.release(frame);
}

void Eagle3Model::combine(const Tensor& rows, const Tensor& g) {
  if (fc_norm_.empty()) {
    backend_.matmul(fc_.weight, rows, g);
    return;
  }
  const int64_t n = rows.rows, th = config_.target_hidden_size;
  const Scratch::Mark frame = scratch_.mark();
  const Tensor normed = scratch_.take(n, rows.cols), chunk = scratch_.take(n, th);
  for (size_t j = 0; j < fc_norm_.size(); ++j) {
    backend_.copy(rows.col_range(static_cast<int64_t>(j) * th, th), chunk);
    backend_.rmsnorm(chunk, fc_norm_[j].tensor, config_.rms_norm_eps, chunk);
    backend_.copy(chunk, normed.col_range(static_cast<int64_t>(j) * th, th));
  }
  backend_.matmul(fc_.weight, normed, g);
  scratch_.release(frame);
}

// Keeps g of this pass's positions and, when the kept rows had it, of the position before.
void Eagle3Model::keep_rows(Eagle3State& state, const Tensor& g, int64_t start) {
  const int64_t n = g.rows, h = config_.hidden_size;
  const bool carry = state.rows_count > 0 && start >= 1 && state.rows_start <= start - 1 &&
                     start - 1 < state.rows_start + state.rows_count;
  const Tensor before = scratch_.take(1, h);
  if (carry) backend_.copy(Tensor::of(*state.rows, state.rows_capacity, h).row_range(start - 1 - state.rows_start, 1), before);
  const int64_t count = n + (carry ? 1 : 0);
  if (count > state.rows_capacity) {
    state.rows_capacity = std::max(count, 2 * state.rows_capacity);
    state.rows = backend_.allocate(static_cast<uint64_t>(state.rows_capacity * h) * sizeof(float));
  }
  const Tensor kept = Tensor::of(*state.rows, state.rows_capacity, h);
  if (carry) backend_.copy(before, kept.row_range(0, 1));
  backend_.copy(g, kept.row_range(carry ? 1 : 0, n));
  state.rows_start = start - (carry ? 1 : 0);
  state.rows_count = count;
}

void Eagle3Model::add_context(DrafterState& base, const Tensor& rows, const int32_t* tokens, int64_t start) {
  Eagle3State& state = static_cast<Eagle3State&>(base);
  const Eagle3Config& c = config_;
  const int64_t n = rows.rows, h = c.hidden_size, kv_lora = c.attention.kv_lora_rank, rope = c.attention.qk_rope_head_dim;
  if (n == 0) return;
  state.cache.reserve(start + n);
  scratch_.reset();
  const Tensor g = scratch_.take(n, h), normed = scratch_.take(n, h), half = scratch_.take(n, c.kv_width());
  combine(rows, g);
  // The hidden half of every position's kv_a output.
  backend_.rmsnorm(g, hidden_norm_.tensor, c.rms_norm_eps, normed);
  kv_half(normed, 1, half);
  backend_.copy(half.col_range(0, kv_lora), state.cache.c(1).row_range(start, n));
  backend_.copy(half.col_range(kv_lora, rope), state.cache.pe(1).row_range(start, n));
  keep_rows(state, g, start);
  // Rows past this pass came from a longer timeline (before a rewind): no longer context.
  if (start > state.context_end) return;  // a gap: positions before it were never covered
  state.context_end = start + n;
  // Latent rows [first, start + n - 1): each position's hidden half plus kv_a of the next token.
  const int64_t first = start > 0 ? start - 1 : 0, m = start + n - 1 - first;
  if (m <= 0) return;
  const Tensor ids = upload_tokens(backend_, scratch_, tokens + (first + 1 - start), m, c.vocab_size);
  const Tensor embedded = scratch_.take(m, h), ckv = scratch_.take(m, c.kv_width()), kept = scratch_.take(m, c.kv_width());
  backend_.embed(*embed_, ids, embedded);
  backend_.rmsnorm(embedded, input_norm_.tensor, c.rms_norm_eps, embedded);
  kv_half(embedded, 0, ckv);
  backend_.copy(state.cache.c(1).row_range(first, m), kept.col_range(0, kv_lora));
  backend_.copy(state.cache.pe(1).row_range(first, m), kept.col_range(kv_lora, rope));
  backend_.add(ckv, kept, ckv);
  write_latent(backend_, mla_, attention_, state.cache, 0, ckv, first);
}

BlockDraft Eagle3Model::draft(DrafterState& base, int32_t anchor, int64_t pos, int k, const ChooseGuess& choose) {
  Eagle3State& state = static_cast<Eagle3State&>(base);
  BlockDraft out;
  if (k <= 0 || pos <= 0 || state.context_end < pos || state.rows_count == 0 || pos - 1 < state.rows_start ||
      pos - 1 >= state.rows_start + state.rows_count)
    return out;
  const Eagle3Config& c = config_;
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  state.cache.reserve(pos - 1 + k);
  state.context_end = pos;  // the draft's rows overwrite the latent rows from pos - 1 on
  scratch_.reset();
  const Tensor g = scratch_.take(1, h), residual = scratch_.take(1, h), normed = scratch_.take(1, h),
               x = scratch_.take(1, 2 * h), delta = scratch_.take(1, h), final = scratch_.take(1, h);
  backend_.copy(Tensor::of(*state.rows, state.rows_capacity, h).row_range(pos - 1 - state.rows_start, 1), g);
  std::vector<float> logits(static_cast<size_t>(vocab));
  int32_t token = anchor;
  for (int i = 0; i < k; ++i) {
    const Scratch::Mark frame = scratch_.mark();
    const Tensor ids = upload_tokens(backend_, scratch_, &token, 1, vocab);
    backend_.embed(*embed_, ids, normed);
    backend_.rmsnorm(normed, input_norm_.tensor, c.rms_norm_eps, normed);
    backend_.copy(normed, x.col_range(0, h));
    backend_.rmsnorm(g, hidden_norm_.tensor, c.rms_norm_eps, normed);
    backend_.copy(normed, x.col_range(h, h));
    backend_.copy(c.norm_before_residual ? normed : g, residual);
    run_mla(backend_, scratch_, mla_, attention_, state.cache, 0, x, pos - 1 + i, delta);
    backend_.add(residual, delta, residual);
    backend_.rmsnorm(residual, post_attention_norm_.tensor, c.rms_norm_eps, normed);
    run_mlp(backend_, scratch_, mlp_, kSiLU, normed, delta);
    backend_.add(residual, delta, residual);
    backend_.rmsnorm(residual, final_norm_.tensor, c.rms_norm_eps, final);
    project_logits(backend_, scratch_, *lm_head_, final, true, logits.data());
    backend_.copy(c.norm_output ? final : residual, g);
    token = choose(logits);
    out.tokens.push_back(token);
    scratch_.release(frame);
  }
  return out;
}

}  // namespace deltafin
