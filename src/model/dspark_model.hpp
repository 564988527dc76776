// DSpark, Kimi K3's published drafter (docs/dspark.md): a few dense pre-norm layers of MLA with
// RoPE, conditioned on the target's own hidden rows. The target's layer outputs at the
// configured layers, concatenated, go through context_proj and context_norm to one context
// vector per position; each draft layer's kv_a_proj_with_mqa turns those into latent cache rows
// at the target's positions. A block [anchor, mask, mask, ...] at the positions after the
// context then runs once through the layers, every block row attending to all context rows
// before the anchor and to the whole block (non-causal); the final norm and the target's lm_head
// give each row's base logits. The low-rank Markov head adds markov_w2 . markov_w1[previous
// token] to row i (the anchor for row 0, then each chosen guess), and the confidence head
// predicts the chance that guess is accepted: sigmoid(w . [final row, markov embedding] + b).
// The target's embedding and lm_head are shared, never copied.
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
#include "weights/dspark_config.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// One token timeline's drafter state: per draft layer the latent rows of the context (and, past
// it, of the last block drafted).
struct DSparkState final : DrafterState {
  explicit DSparkState(LatentKvCache c) : cache(std::move(c)) {}
  void forget() override { context_end = 0; }
  LatentKvCache cache;
  int64_t context_end = 0;  // rows [0, context_end) hold the current timeline's context
};

// Its guesses' confidence is the confidence head's (empty without one); each row's logits carry
// the Markov bias.
class DSparkModel final : public HiddenDrafter {
 public:
  // embed, lm_head: the target's, which outlive this model.
  DSparkModel(const std::string& dir, const DSparkConfig& config, Backend& backend, const Weight& embed,
              const Weight& lm_head);

  const DSparkConfig& config() const { return config_; }
  const std::vector<int64_t>& target_layers() const override { return config_.target_layer_ids; }
  uint64_t bytes() const override { return bytes_; }
  std::unique_ptr<DrafterState> new_state() const override;
  // Context from the target's pass (its tokens are not needed: a context vector per position).
  void add_context(DrafterState& state, const Tensor& rows, const int32_t* tokens, int64_t start) override;
  // From context rows [0, pos).
  BlockDraft draft(DrafterState& state, int32_t anchor, int64_t pos, int k, const ChooseGuess& choose) override;

 private:
  struct Layer {
    SpineVector input_norm, post_attention_norm;
    MlaWeights attention;
    Mlp mlp;
  };

  DSparkConfig config_;
  Backend& backend_;
  const Weight& embed_;
  const Weight& lm_head_;
  Scratch scratch_;
  SpineVector inv_freq_;
  MlaSpec mla_;
  SpineMatrix context_proj_, markov_w1_, markov_w2_;
  SpineVector context_norm_, final_norm_;
  std::vector<float> confidence_w_;  // [hidden (+ markov_rank)] then the bias
  std::vector<Layer> layers_;
  uint64_t bytes_ = 0;
};

}  // namespace deltafin
