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
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "model/blocks.hpp"
#include "model/kv_cache.hpp"
#include "model/spine.hpp"
#include "weights/dspark_config.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// One token timeline's drafter state: per draft layer the latent rows of the context (and, past
// it, of the last block drafted).
struct DSparkState {
  LatentKvCache cache;
  int64_t context_end = 0;  // rows [0, context_end) hold the current timeline's context
};

// A block's guesses: tokens[i] and the confidence head's chance that it is accepted given the
// ones before were (empty without a confidence head).
struct BlockGuesses {
  std::vector<int32_t> tokens;
  std::vector<double> confidence;
};

// Picks row i's token from its logits (Markov bias added) [vocab].
using ChooseToken = std::function<int32_t(std::span<const float> logits)>;

class DSparkModel {
 public:
  // embed, lm_head: the target's, which outlive this model.
  DSparkModel(const std::string& dir, const DSparkConfig& config, Backend& backend, const Weight& embed,
              const Weight& lm_head);

  const DSparkConfig& config() const { return config_; }
  uint64_t bytes() const { return bytes_; }  // weights it holds on the backend
  DSparkState new_state() const;
  // Context from the target's pass over positions [start, start + rows.rows): rows
  // [n, target layers * hidden], the layer outputs in target_layer_ids' order.
  void add_context(DSparkState& state, const Tensor& rows, int64_t start);
  // Up to k guesses after `anchor`, the pending token at position `pos`, from context rows
  // [0, pos) (none when the state lacks them).
  BlockGuesses draft(DSparkState& state, int32_t anchor, int64_t pos, int k, const ChooseToken& choose);

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
