// An EAGLE-3 head for Kimi K3 (docs/eagle3.md), as vLLM's Eagle3DeepseekV2ForCausalLM and its
// EAGLE proposer run it: the target's rows at the aux layers, concatenated (each RMS-normed first
// with fc_norm), go through fc to one hidden row g_t per position. Its one decoder layer reads, at
// position p, x = [RMSNorm(embed(token)), RMSNorm(g)] (2 x hidden) into MLA with RoPE and its own
// latent cache, then a dense SiLU MLP; the final norm and lm_head give the logits.
//
// Context row t pairs g_t with the token at t + 1, so a row is complete only once the next token
// is known: kv_a is linear, so each position keeps the hidden half of kv_a's output (kv_a of
// [0, RMSNorm(g_t)]) and the latent row t is finished, when a pass brings token t + 1, with kv_a of
// [RMSNorm(embed(token t + 1)), 0]. A rewind costs nothing then, however deep. Drafting after the
// pending token (anchor) at `pos`: the row at pos - 1 (g_{pos-1}, anchor) gives guess 1; each next
// step runs at the next position on the previous guess and the previous step's hidden (the pre-norm
// sum; the normed output with norm_output), greedy or as `choose` picks. The rows of the latest
// pass (and the one before it) keep g for that.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "model/blocks.hpp"
#include "model/hidden_drafter.hpp"
#include "model/kv_cache.hpp"
#include "model/spine.hpp"
#include "weights/eagle3_config.hpp"

namespace deltafin {

struct Eagle3State final : DrafterState {
  explicit Eagle3State(LatentKvCache c) : cache(std::move(c)) {}
  void forget() override { context_end = 0, rows_count = 0; }
  // Layer 0: the layer's latent rows (context rows [0, context_end - 1), then a draft's rows).
  // Layer 1: per position [0, context_end) the hidden half of kv_a's output, before the norm.
  LatentKvCache cache;
  int64_t context_end = 0;  // positions [0, context_end) were covered by the target's passes
  std::unique_ptr<Buffer> rows;  // g of positions [rows_start, rows_start + rows_count)
  int64_t rows_start = 0, rows_count = 0, rows_capacity = 0;
};

class Eagle3Model final : public HiddenDrafter {
 public:
  // embed, lm_head: the target's (used when the head has none of its own), which outlive this model.
  Eagle3Model(const std::string& dir, const Eagle3Config& config, Backend& backend, const Weight& embed,
              const Weight& lm_head);

  const Eagle3Config& config() const { return config_; }
  const std::vector<int64_t>& target_layers() const override { return config_.target_layers; }
  uint64_t bytes() const override { return bytes_; }
  std::unique_ptr<DrafterState> new_state() const override;
  void add_context(DrafterState& state, const Tensor& rows, const int32_t* tokens, int64_t start) override;
  // Needs context rows [0, pos - 1) and g_{pos-1}; none otherwise.
  BlockDraft draft(DrafterState& state, int32_t anchor, int64_t pos, int k, const ChooseGuess& choose) override;

 private:
  // kv_a of [x, 0] (half 0) or [0, x] (half 1) for rows x [n, hidden] into out [n, kv_lora + rope].
  void kv_half(const Tensor& x, int half, const Tensor& out);
  // g rows from the target's rows [n, aux * target hidden].
  void combine(const Tensor& rows, const Tensor& g);
  void keep_rows(Eagle3State& state, const Tensor& g, int64_t start);

  Eagle3Config config_;
  Backend& backend_;
  Scratch scratch_;
  SpineVector inv_freq_;
  MlaSpec mla_;
  SpineMatrix fc_, own_embed_, own_lm_head_;
  const Weight* embed_;
  const Weight* lm_head_;
  std::vector<SpineVector> fc_norm_;
  SpineVector input_norm_, hidden_norm_, post_attention_norm_, final_norm_;
  MlaWeights attention_;
  Mlp mlp_;
  uint64_t bytes_ = 0;
};

}  // namespace deltafin
