// The DSpark drafter's passes (see dspark_model.hpp).
#include "model/dspark_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/rope.hpp"

namespace deltafin {
namespace {

constexpr GatedActivation kSiLU{GatedActivation::kSiLU};

}  // namespace

DSparkModel::DSparkModel(const std::string& dir, const DSparkConfig& config, Backend& backend, const Weight& embed,
                         const Weight& lm_head)
    : config_(config), backend_(backend), embed_(embed), lm_head_(lm_head), scratch_(backend) {
  const DSparkConfig& c = config_;
  const ModelConfig& a = c.attention;
  const int64_t h = c.hidden_size;
  const std::unique_ptr<WeightIndex> index = WeightIndex::open(dir, "context_proj.weight");
  SpineLoader load(backend, *index);
  const Rope rope(a);
  inv_freq_ = load.upload(rope.inv_freq());
  mla_ = {{a.num_attention_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.kv_lora_rank, a.softmax_scale()},
          h, a.q_lora_rank, c.rms_norm_eps, false, &inv_freq_.tensor, rope.attention_factor()};
  const int64_t context_width = c.target_hidden_size * static_cast<int64_t>(c.target_layer_ids.size());
  context_proj_ = load.matrix("context_proj", h, context_width);
  context_norm_ = load.vector("context_norm.weight", h);
  final_norm_ = load.vector("final_norm.weight", h);
  markov_w1_ = load.matrix("markov_head.markov_w1", c.vocab_size, c.markov_rank);
  markov_w2_ = load.matrix("markov_head.markov_w2", c.vocab_size, c.markov_rank);
  if (c.confidence_head) {
    const int64_t in = h + (c.confidence_with_markov ? c.markov_rank : 0);
    confidence_w_ = load.floats("confidence_head.proj.weight", {{1, in}, {in}});
    const std::vector<float> bias = load.floats("confidence_head.proj.bias", {{1}});
    confidence_w_.push_back(bias[0]);
  }
  layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    const std::string p = fmt::format("layers.{}.", l);
    L.input_norm = load.vector(p + "input_layernorm.weight", h);
    L.post_attention_norm = load.vector(p + "post_attention_layernorm.weight", h);
    L.attention = load_mla(load, p + "self_attn.", mla_);
    L.mlp = load_mlp(load, p + "mlp.", c.intermediate_size, h);
  }
  bytes_ = load.bytes();
}

std::unique_ptr<DrafterState> DSparkModel::new_state() const {
  return std::make_unique<DSparkState>(LatentKvCache(backend_, config_.num_hidden_layers, config_.attention.kv_lora_rank,
                                                     config_.attention.qk_rope_head_dim));
}

void DSparkModel::add_context(DrafterState& base, const Tensor& rows, const int32_t*, int64_t start) {
  DSparkState& state = static_cast<DSparkState&>(base);
  const int64_t n = rows.rows, h = config_.hidden_size;
  if (n == 0) return;
  state.cache.reserve(start + n);
  scratch_.reset();
  const Tensor context = scratch_.take(n, h), ckv = scratch_.take(n, config_.kv_width());
  backend_.matmul(context_proj_.weight, rows, context);
  backend_.rmsnorm(context, context_norm_.tensor, config_.rms_norm_eps, context);
  for (size_t l = 0; l < layers_.size(); ++l) {
    backend_.matmul(layers_[l].attention.kv_a.weight, context, ckv);
    write_latent(backend_, mla_, layers_[l].attention, state.cache, static_cast<int64_t>(l), ckv, start);
  }
  // Rows past this pass came from a longer timeline (before a rewind): no longer context.
  if (start <= state.context_end) state.context_end = start + n;
}

BlockDraft DSparkModel::draft(DrafterState& base, int32_t anchor, int64_t pos, int k, const ChooseGuess& choose) {
  DSparkState& state = static_cast<DSparkState&>(base);
  BlockDraft out;
  if (k <= 0 || pos <= 0 || state.context_end < pos) return out;
  const DSparkConfig& c = config_;
  const int64_t h = c.hidden_size, r = c.markov_rank, vocab = c.vocab_size;
  state.cache.reserve(pos + k);
  state.context_end = pos;  // the block's rows overwrite what lay past the anchor
  scratch_.reset();
  std::vector<int32_t> block(static_cast<size_t>(k), static_cast<int32_t>(c.mask_token_id));
  block[0] = anchor;
  const Tensor ids = upload_tokens(backend_, scratch_, block.data(), k, vocab);
  const Tensor x = scratch_.take(k, h), normed = scratch_.take(k, h), delta = scratch_.take(k, h);
  backend_.embed(embed_, ids, x);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const Scratch::Mark frame = scratch_.mark();
    backend_.rmsnorm(x, L.input_norm.tensor, c.rms_norm_eps, normed);
    run_mla(backend_, scratch_, mla_, L.attention, state.cache, static_cast<int64_t>(l), normed, pos, delta, pos + k);
    backend_.add(x, delta, x);
    backend_.rmsnorm(x, L.post_attention_norm.tensor, c.rms_norm_eps, normed);
    run_mlp(backend_, scratch_, L.mlp, kSiLU, normed, delta);
    backend_.add(x, delta, x);
    scratch_.release(frame);
  }
  backend_.rmsnorm(x, final_norm_.tensor, c.rms_norm_eps, normed);
  std::vector<float> logits(static_cast<size_t>(k * vocab)), rows(static_cast<size_t>(k * h)), bias(vocab), embed(r);
  project_logits(backend_, scratch_, lm_head_, normed, true, logits.data());
  if (!confidence_w_.empty()) backend_.download(normed, rows.data());
  // The Markov head, row by row: each row's bias depends on the token chosen before it.
  const Tensor prev = scratch_.take(1, 1, Elem::I32), e = scratch_.take(1, r), b = scratch_.take(1, vocab);
  int32_t previous = anchor;
  for (int i = 0; i < k; ++i) {
    backend_.upload(&previous, *prev.buffer, prev.offset, 4);
    backend_.embed(markov_w1_.weight, prev, e);
    backend_.matmul(markov_w2_.weight, e, b);
    backend_.download(b, bias.data());
    const std::span<float> row(logits.data() + static_cast<size_t>(i) * vocab, vocab);
    for (int64_t t = 0; t < vocab; ++t) row[t] += bias[t];
    if (!confidence_w_.empty()) {
      double z = confidence_w_.back();
      for (int64_t j = 0; j < h; ++j) z += static_cast<double>(confidence_w_[j]) * rows[i * h + j];
      if (c.confidence_with_markov) {
        backend_.download(e, embed.data());
        for (int64_t j = 0; j < r; ++j) z += static_cast<double>(confidence_w_[h + j]) * embed[j];
      }
      out.confidence.push_back(1.0 / (1.0 + std::exp(-z)));
    }
    previous = choose(row);
    out.tokens.push_back(previous);
  }
  return out;
}

}  // namespace deltafin
