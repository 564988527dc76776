// Kimi K3: Kimi Delta Attention (linear attention with a short causal conv, a per-channel
// sigmoid-bounded decay and a delta-rule recurrent state) and gated MLA without RoPE, mixed by
// Attention Residuals (the residual stream is replaced by softmax mixes over block snapshots),
// with a latent MoE (sigmoid router; experts run in a narrower latent space; SiTU-GLU) and
// fused shared experts. What each config value means: docs/kimi-k3.md. The pass is backend
// ops only (model/blocks.hpp, model/routed_experts.hpp).
//
// Only the spine is resident; routed experts come from the ExpertStore. A pass over n positions
// is batch-invariant (matmuls per row, recurrences token by token in order), so a chunk equals
// its positions run one at a time. Token-timeline state lives in K3State: the latent cache is
// append-only (a rewind only moves the position), the recurrent part is saved before a
// multi-token pass and restored to roll back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <memory>
#include <vector>

#include <deltafin/engine.hpp>

#include "backend/backend.hpp"
#include "model/drafter_memory.hpp"
#include "backend/scratch.hpp"
#include "io/expert_store.hpp"
#include "model/blocks.hpp"
#include "model/hidden_drafter.hpp"
#include "weights/dspark_config.hpp"
#include "weights/eagle3_config.hpp"
#include "model/kv_cache.hpp"
#include "model/lookahead.hpp"
#include "model/routed_experts.hpp"
#include "weights/routing_trace.hpp"
#include "model/spine.hpp"
#include "weights/expert_table.hpp"
#include "weights/k3_config.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// The routed experts of a K3 checkpoint: model.layers.L.block_sparse_moe.experts.E.{w1,w3,w2}.
ExpertTable k3_expert_table(const WeightIndex& index, const K3Config& config);

// Everything a K3 token timeline carries from one position to the next.
struct K3State {
  LatentKvCache mla;                  // latent cache of the MLA layers (append-only)
  std::unique_ptr<Buffer> recurrent;  // per KDA layer: state [heads * head_dim, head_dim], then
                                      // the conv windows [3 * (taps - 1), heads * head_dim]
  std::unique_ptr<DrafterState> draft;  // with a built-in drafter: its context of this timeline
};

// Called with [n, hidden] rows as the golden fixtures lay them out: row 0 the embedding, row
// l + 1 the output (AttnRes block partial sum) of layer l, row L + 1 the output mix, row L + 2
// the final norm.
using K3Observer = std::function<void(int64_t row, const float* hidden, int64_t n)>;

class K3Model {
 public:
  // stream: the spine's streamed units (nullptr: all resident).
  K3Model(const WeightIndex& index, const K3Config& config, Backend& backend, ExpertStore& experts,
          SpineStream* stream = nullptr);

  const K3Config& config() const { return config_; }
  uint64_t spine_bytes() const { return spine_bytes_; }
  const PassStats& stats() const { return stats_; }
  K3State new_state() const;
  // A copy of the recurrent part, and putting one back (nullptr: the initial zeros).
  std::unique_ptr<Buffer> save_recurrent(const K3State& state) const;
  void restore_recurrent(K3State& state, const Buffer* saved) const;
  // The state at `positions` as bytes (model/state_bytes.hpp: the MLA layers' latent rows, the
  // recurrent buffer), and such bytes put back (throws deltafin::Error in one line when they do
  // not fit this model; the state is then unchanged).
  std::vector<std::byte> save_state(const K3State& state, int64_t positions) const;
  void load_state(K3State& state, int64_t positions, std::span<const std::byte> bytes) const;
  // Router lookahead prefetch with at most `byte_cap` bytes in flight (0: off, the default).
  void set_lookahead(uint64_t byte_cap) { lookahead_ = Lookahead(byte_cap); }
  // Who runs the routed experts (default: the store's experts on this backend); outlives the model.
  void set_producer(ExpertProducer& producer) { producer_ = &producer; }
  // Where every pass's routing is written (nullptr: nowhere, the default); outlives the model.
  void set_routing_recorder(RoutingRecorder* recorder) { recorder_ = recorder; }
  RoutingRecorder* routing_recorder() const { return recorder_; }
  // A built-in drafter (DSpark, EAGLE-3) fed by every pass (nullptr: none, the default); outlives
  // the model. States made after this carry its context. Its rows come from the layer outputs
  // (row l + 1 of the observer's numbering) at its target_layers().
  void set_drafter(HiddenDrafter* drafter) { drafter_ = drafter; }
  bool has_drafter() const { return drafter_ != nullptr; }
  // Up to k guesses after `anchor` at position `pos` of `state` (HiddenDrafter::draft).
  BlockDraft draft_block(K3State& state, int32_t anchor, int64_t pos, int k, const ChooseGuess& choose);
  // The embedding and lm_head, which a drafter shares.
  const Weight& embedding() const { return embed_.weight; }
  const Weight& lm_head() const { return lm_head_.weight; }

  // Runs tokens [n] at positions [start, start + n) on `state` (which holds [0, start)).
  // logits: [n, vocab] when all_logits, else [1, vocab] for the last position.
  void forward(K3State& state, const int32_t* tokens, int64_t n, int64_t start, float* logits, bool all_logits,
               const K3Observer& observer = {});

 private:
  struct Kda {
    SpineMatrix q, k, v, f_a, f_b, b, g, o;
    SpineVector conv_q, conv_k, conv_v;  // [channels, taps]
    SpineVector dt_bias;                 // [1, channels]
    SpineVector decay_rate;              // [1, heads] exp(A_log)
    SpineVector o_norm;                  // [1, head_dim]
  };
  struct Moe {
    SpineMatrix router, down_latent, up_latent;
    SpineVector router_bias, latent_norm;
    Mlp shared;
  };
  struct Layer {
    SpineVector input_norm, post_attention_norm;
    SpineVector attn_res_query, mlp_res_query;  // folded norm weight x projection [1, hidden]
    bool mla = false, moe = false;
    Kda kda;
    MlaWeights mla_weights;
    Mlp dense;
    Moe moe_weights;
    uint64_t recurrent_offset = 0;  // KDA layers: bytes into K3State::recurrent
  };

  SpineVector res_query(SpineLoader& load, const std::string& prefix);
  void load_kda(SpineLoader& load, const std::string& p, Kda& w);
  void load_moe(SpineLoader& load, const std::string& p, Moe& w);

  void kda(int64_t layer, K3State& state, const Tensor& x, const Tensor& out);
  void moe(int64_t layer, const Tensor& x, int64_t start, const Tensor& out);  // start: first position
  // out = the Attention-Residuals mix of blocks [0, sealed) and the live sum `partial`.
  void mix(const std::vector<Tensor>& blocks, size_t sealed, const Tensor& partial, const Tensor& query, const Tensor& out);
  RouterWeights router(int64_t layer) const {
    return {&layers_[layer].moe_weights.router.weight, layers_[layer].moe_weights.router_bias.tensor};
  }

  const K3Config& config_;
  Backend& backend_;
  ExpertStore& experts_;
  LocalExperts local_experts_;  // the store's experts on backend_
  ExpertProducer* producer_ = &local_experts_;  // who runs the routed experts (set_producer)
  RoutingRecorder* recorder_ = nullptr;
  HiddenDrafter* drafter_ = nullptr;
  Scratch scratch_;
  MlaSpec mla_;
  RouterSpec router_spec_;
  GatedActivation situ_;
  uint64_t recurrent_bytes_ = 0;
  uint64_t spine_bytes_ = 0;
  SpineMatrix embed_, lm_head_;
  SpineVector final_norm_, output_res_query_;
  std::vector<Layer> layers_;
  PassStats stats_;
  Lookahead lookahead_;
  SpineStream* stream_ = nullptr;
};

// The family's traits for the engine template (decode/model_engine.hpp says what each is).
struct K3Traits {
  using Config = K3Config;
  using Model = K3Model;
  using State = K3State;
  static constexpr bool kRecurrent = true;
  static constexpr bool kBlockDrafter = true;  // DSpark, EAGLE-3 (EngineOptions::dspark_dir, eagle3_dir)
  static Config load(const std::string& path) { return load_k3_config(path); }
  // The drafter's share of the plan (none without --draft dspark or eagle3); throws when it does
  // not fit this target.
  static DrafterMemory drafter_memory(const EngineOptions& o, const Config& c) {
    if (!o.dspark_dir.empty() && !o.eagle3_dir.empty()) fail("--draft: one built-in drafter at a time (dspark or eagle3)");
    if (!o.eagle3_dir.empty()) return eagle3_memory(load_eagle3_config(o.eagle3_dir, c));
    if (o.dspark_dir.empty()) return {};
    const DSparkConfig d = load_dspark_config(o.dspark_dir);
    check_dspark_target(d, c);
    return dspark_memory(d);
  }
  static ExpertTable experts(const WeightIndex& index, const Config& c) { return k3_expert_table(index, c); }
  static State new_state(const Model& m) { return m.new_state(); }
  static uint64_t state_bytes(const State& s) { return s.mla.bytes() + s.recurrent->bytes(); }
  static std::vector<std::byte> save_state(const Model& m, const State& s, int64_t n) { return m.save_state(s, n); }
  static void load_state(const Model& m, State& s, int64_t n, std::span<const std::byte> b) { m.load_state(s, n, b); }
  static std::string name(const Config&) { return "kimi_k3 (KDA + gated MLA hybrid)"; }
  static int64_t vocab(const Config& c) { return c.vocab_size; }
  static int64_t eos(const Config& c) { return c.eos_token_id; }
  static int64_t context(const Config& c) { return c.max_position_embeddings; }
  static ModelBytes bytes(const Config& c) { return k3_bytes_from_config(c); }
  static int64_t top_k(const Config& c) { return c.num_experts_per_token; }
};

}  // namespace deltafin
