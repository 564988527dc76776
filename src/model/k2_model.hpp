// The Kimi K2 family / DeepSeek-V3 architecture: MLA attention (q-LoRA or direct q_proj, YaRN
// RoPE on the interleaved layout, absorbed attention over a latent cache), dense first layers,
// then MoE layers (sigmoid router with correction bias, group-limited top-k, shared experts).
// Only the spine is resident; routed experts come from the ExpertStore for every pass. The pass
// is backend ops only (model/blocks.hpp, model/routed_experts.hpp).
//
// forward() runs a chunk of consecutive positions in one pass: every op is batch-invariant and
// routed-expert outputs are summed per position in ascending expert order, so a chunk gives
// bit-identical results to running its positions one at a time. Each expert in the union of a
// chunk's selections is acquired once and run once over all positions that chose it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "backend/backend.hpp"
#include "model/drafter_memory.hpp"
#include "util/error.hpp"
#include "backend/scratch.hpp"
#include "io/expert_store.hpp"
#include "model/blocks.hpp"
#include "model/kv_cache.hpp"
#include "model/lookahead.hpp"
#include "model/routed_experts.hpp"
#include "weights/routing_trace.hpp"
#include "model/spine.hpp"
#include "weights/expert_table.hpp"
#include "weights/model_config.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// Called with the residual stream [n, hidden] entering layer `layer` (layer == num_layers: the
// final normed output), for tests that compare against a reference layer by layer.
using LayerObserver = std::function<void(int64_t layer, const float* hidden, int64_t n)>;

// The routed experts of a K2-family checkpoint: model.layers.L.mlp.experts.E.{gate,up,down}_proj.
ExpertTable k2_expert_table(const WeightIndex& index, const ModelConfig& config);

class K2Model {
 public:
  // stream: the spine's streamed units (nullptr: all resident).
  K2Model(const WeightIndex& index, const ModelConfig& config, Backend& backend, ExpertStore& experts,
          SpineStream* stream = nullptr);

  const ModelConfig& config() const { return config_; }
  uint64_t spine_bytes() const { return spine_bytes_; }
  const PassStats& stats() const { return stats_; }
  LatentKvCache new_cache() const;
  // The cache at `positions` as bytes (model/state_bytes.hpp), and such bytes put back (throws
  // deltafin::Error in one line when they do not fit this model; the cache is then unchanged).
  std::vector<std::byte> save_state(const LatentKvCache& cache, int64_t positions) const;
  void load_state(LatentKvCache& cache, int64_t positions, std::span<const std::byte> bytes) const;
  // Router lookahead prefetch with at most `byte_cap` bytes in flight (0: off, the default).
  void set_lookahead(uint64_t byte_cap) { lookahead_ = Lookahead(byte_cap); }
  // Who runs the routed experts (default: the store's experts on this backend); outlives the model.
  void set_producer(ExpertProducer& producer) { producer_ = &producer; }
  // Where every pass's routing is written (nullptr: nowhere, the default); outlives the model.
  void set_routing_recorder(RoutingRecorder* recorder) { recorder_ = recorder; }
  RoutingRecorder* routing_recorder() const { return recorder_; }

  // Runs tokens [n] at positions [start, start + n) against `cache` (which must hold [0, start)).
  // logits: [n, vocab] when all_logits, else [1, vocab] for the last position.
  void forward(LatentKvCache& cache, const int32_t* tokens, int64_t n, int64_t start, float* logits,
               bool all_logits, const LayerObserver& observer = {});

 private:
  struct Layer {
    SpineVector input_norm, post_attention_norm;
    MlaWeights attn;
    bool moe = false;
    Mlp mlp;     // dense layers
    Mlp shared;  // MoE layers with shared experts
    SpineMatrix router;
    SpineVector router_bias;
  };

  void moe(int64_t layer, const Tensor& x, int64_t start, const Tensor& out);  // start: first position
  RouterWeights router(int64_t layer) const { return {&layers_[layer].router.weight, layers_[layer].router_bias.tensor}; }

  const ModelConfig& config_;
  Backend& backend_;
  ExpertStore& experts_;
  LocalExperts local_experts_;  // the store's experts on backend_
  ExpertProducer* producer_ = &local_experts_;  // who runs the routed experts (set_producer)
  RoutingRecorder* recorder_ = nullptr;
  Scratch scratch_;
  SpineVector inv_freq_;  // RoPE [1, rope / 2]
  MlaSpec mla_;
  RouterSpec router_spec_;
  uint64_t spine_bytes_ = 0;
  SpineMatrix embed_, lm_head_;
  SpineVector final_norm_;
  std::vector<Layer> layers_;
  PassStats stats_;
  Lookahead lookahead_;
  SpineStream* stream_ = nullptr;
};

// The family's traits for the engine template (decode/model_engine.hpp says what each is).
struct K2Traits {
  using Config = ModelConfig;
  using Model = K2Model;
  using State = LatentKvCache;
  static constexpr bool kRecurrent = false;
  static constexpr bool kBlockDrafter = false;
  static DrafterMemory drafter_memory(const EngineOptions& o, const Config& c) {
    if (!o.dspark_dir.empty())
      fail("--draft dspark: DSpark drafts for Kimi K3; {} is {} (use --draft model or ngram)", o.model_dir, name(c));
    if (!o.eagle3_dir.empty())
      fail("--draft eagle3: the EAGLE-3 head drafts for Kimi K3; {} is {} (use --draft model or ngram)", o.model_dir,
           name(c));
    return {};
  }
  static Config load(const std::string& path) { return load_model_config(path); }
  static ExpertTable experts(const WeightIndex& index, const Config& c) { return k2_expert_table(index, c); }
  static State new_state(const Model& m) { return m.new_cache(); }
  static uint64_t state_bytes(const State& s) { return s.bytes(); }
  static std::vector<std::byte> save_state(const Model& m, const State& s, int64_t n) { return m.save_state(s, n); }
  static void load_state(const Model& m, State& s, int64_t n, std::span<const std::byte> b) { m.load_state(s, n, b); }
  static std::string name(const Config& c) { return c.model_type + " (DeepSeek-V3 architecture)"; }
  static int64_t vocab(const Config& c) { return c.vocab_size; }
  static int64_t eos(const Config& c) { return c.eos_token_id; }
  static int64_t context(const Config& c) { return c.max_position_embeddings; }
  static ModelBytes bytes(const Config& c) { return k2_bytes_from_config(c); }
  static int64_t top_k(const Config& c) { return c.num_experts_per_tok; }
};

}  // namespace deltafin
