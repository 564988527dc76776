// Kimi K3: Kimi Delta Attention (linear attention with a short causal conv, a per-channel
// sigmoid-bounded decay and a delta-rule recurrent state) and gated MLA without RoPE, mixed by
// Attention Residuals (the residual stream is replaced by softmax mixes over block snapshots),
// with a latent MoE (sigmoid router; experts run in a narrower latent space; SiTU-GLU) and
// fused shared experts. What each config value means: docs/kimi-k3.md.
//
// Only the spine is resident; routed experts come from the ExpertStore. A pass over n positions
// is batch-invariant (matmuls per row, recurrences token by token in order), so a chunk equals
// its positions run one at a time. Token-timeline state lives in K3State, which a session can
// copy to snapshot and restore to roll back.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "io/expert_store.hpp"
#include "model/kv_cache.hpp"
#include "model/lookahead.hpp"
#include "model/routed_experts.hpp"
#include "model/spine.hpp"
#include "weights/expert_table.hpp"
#include "weights/k3_config.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// The routed experts of a K3 checkpoint: model.layers.L.block_sparse_moe.experts.E.{w1,w3,w2}.
ExpertTable k3_expert_table(const WeightIndex& index, const K3Config& config);

// Everything a K3 token timeline carries from one position to the next.
struct K3State {
  std::vector<std::vector<float>> kda_state;  // [layer] [heads, head_dim, head_dim] (KDA layers)
  std::vector<std::vector<float>> conv;       // [layer] [3 branches][taps - 1][channels] pre-conv inputs
  LatentKvCache mla;                          // latent cache of the MLA layers (append-only)
};

// Called with [n, hidden] rows as the golden fixtures lay them out: row 0 the embedding, row
// l + 1 the output (AttnRes block partial sum) of layer l, row L + 1 the output mix, row L + 2
// the final norm.
using K3Observer = std::function<void(int64_t row, const float* hidden, int64_t n)>;

class K3Model {
 public:
  K3Model(const WeightIndex& index, const K3Config& config, Backend& backend, ExpertStore& experts);

  const K3Config& config() const { return config_; }
  uint64_t spine_bytes() const { return spine_bytes_; }
  const PassStats& stats() const { return stats_; }
  K3State new_state() const;
  // Router lookahead prefetch with at most `byte_cap` bytes in flight (0: off, the default).
  void set_lookahead(uint64_t byte_cap) { lookahead_ = Lookahead(byte_cap); }

  // Runs tokens [n] at positions [start, start + n) on `state` (which holds [0, start)).
  // logits: [n, vocab] when all_logits, else [1, vocab] for the last position.
  void forward(K3State& state, const int32_t* tokens, int64_t n, int64_t start, float* logits, bool all_logits,
               const K3Observer& observer = {});

 private:
  struct Mlp {
    SpineMatrix gate, up, down;
  };
  struct Kda {
    SpineMatrix q, k, v, f_a, f_b, b, g, o;
    std::vector<float> conv_q, conv_k, conv_v;  // [channels, taps]
    std::vector<float> dt_bias;                 // [channels]
    std::vector<float> decay_rate;              // [heads] exp(A_log)
    std::vector<float> o_norm;                  // [head_dim]
  };
  struct Mla {
    SpineMatrix q_a, q_b, kv_a, kv_b, g, o;
    std::vector<float> q_a_norm, kv_a_norm;
  };
  struct Moe {
    SpineMatrix router, down_latent, up_latent;
    std::vector<float> router_bias, latent_norm;
    Mlp shared;
  };
  struct Layer {
    std::vector<float> input_norm, post_attention_norm;
    std::vector<float> attn_res_query, mlp_res_query;  // folded norm weight x projection [hidden]
    bool mla = false, moe = false;
    Kda kda;
    Mla mla_weights;
    Mlp dense;
    Moe moe_weights;
  };

  SpineMatrix load(const std::string& name, int64_t rows, int64_t cols);
  std::vector<float> res_query(const std::string& prefix);
  void load_kda(const std::string& p, Kda& w);
  void load_mla(const std::string& p, Mla& w);
  void load_moe(const std::string& p, Moe& w);

  void kda(int64_t layer, K3State& state, const float* x, int64_t n, float* out);
  void mla(int64_t layer, K3State& state, const float* x, int64_t n, int64_t start, float* out);
  void mlp(const Mlp& w, const float* x, int64_t n, float* out);
  void moe(int64_t layer, const float* x, int64_t n, int64_t start, float* out);  // start: first position
  void mix(const std::vector<std::vector<float>>& blocks, const std::vector<float>& partial, const float* query,
           int64_t n, float* out);

  const K3Config& config_;
  const WeightIndex& index_;
  Backend& backend_;
  ExpertStore& experts_;
  uint64_t spine_bytes_ = 0;
  SpineMatrix embed_, lm_head_;
  std::vector<float> final_norm_, output_res_query_;
  std::vector<Layer> layers_;
  PassStats stats_;
  Lookahead lookahead_;
};

}  // namespace deltafin
