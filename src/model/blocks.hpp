// The blocks both model families build their passes from, in backend ops only:
//   Mlp   gate/up projections, the gated activation, the down projection (dense layers, shared
//         experts);
//   Mla   multi-head latent attention: q (through q-LoRA or a direct q_proj), the latent kv row
//         normalised into the cache with its shared key part (rotated by RoPE where the family
//         has it), absorbed attention over the cache, an optional sigmoid output gate, o_proj.
// and the pass's ends: the token ids going up, the logits coming back.
// Activations: x [n, hidden] in, out [n, hidden] out; temporaries come from the pass's Scratch.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "model/kv_cache.hpp"
#include "model/spine.hpp"

namespace deltafin {

// The pass's token ids [n, 1] on the backend; throws naming an id outside [0, vocab).
Tensor upload_tokens(Backend& backend, Scratch& scratch, const int32_t* tokens, int64_t n, int64_t vocab);
// lm_head over the normed rows (all of them, or the last) into host logits [rows, vocab].
void project_logits(Backend& backend, Scratch& scratch, const Weight& lm_head, const Tensor& normed, bool all_logits,
                    float* logits);

struct Mlp {
  SpineMatrix gate, up, down;
};

// prefix + "gate_proj", "up_proj" [width, hidden] and "down_proj" [hidden, width].
Mlp load_mlp(SpineLoader& loader, const std::string& prefix, int64_t width, int64_t hidden);
void run_mlp(Backend& backend, Scratch& scratch, const Mlp& mlp, const GatedActivation& act, const Tensor& x,
             const Tensor& out);

struct MlaSpec {
  MlaShape shape;              // heads, nope, rope, v, kv_lora, softmax scale
  int64_t hidden = 0;
  int64_t q_lora = 0;          // 0: a direct q_proj
  float norm_eps = 1e-6f;      // q_a_layernorm / kv_a_layernorm
  bool output_gate = false;    // K3: attn *= sigmoid(g_proj x)
  const Tensor* inv_freq = nullptr;  // RoPE frequencies [1, rope / 2] (nullptr: no rotation)
  float attention_factor = 1.0f;
  int64_t input = 0;           // width of x when it is not `hidden` (an EAGLE-3 layer reads 2 x hidden)
};

struct MlaWeights {
  SpineMatrix q_a, q_b, q_proj, kv_a, kv_b, g, o;
  SpineVector q_a_norm, kv_a_norm;
};

MlaWeights load_mla(SpineLoader& loader, const std::string& prefix, const MlaSpec& spec);
// Appends positions [start, start + n) to the cache's `layer` and attends over it: causally
// (row i over rows [0, start + i]), or with `visible` > 0 every row over rows [0, visible) (a
// drafter's non-causal block).
void run_mla(Backend& backend, Scratch& scratch, const MlaSpec& spec, const MlaWeights& w, LatentKvCache& cache,
             int64_t layer, const Tensor& x, int64_t start, const Tensor& out, int64_t visible = 0);
// Rows [start, start + n) of the cache's `layer` from kv_a's output ckv [n, kv_lora + rope]: the
// latent normalised by kv_a_layernorm, the shared key part rotated at its positions.
void write_latent(Backend& backend, const MlaSpec& spec, const MlaWeights& w, LatentKvCache& cache, int64_t layer,
                  const Tensor& ckv, int64_t start);

}  // namespace deltafin
