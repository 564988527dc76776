// The activations of a pass from config.json (see pass_activations.hpp). Each term names the
// tensors model/*.cpp takes, in floats (or int32) per position; a frame's terms are the tensors
// alive at once at its peak.
#include "weights/pass_activations.hpp"

#include "weights/k3_config.hpp"
#include "weights/model_config.hpp"

namespace deltafin {
namespace {

constexpr uint64_t kAlign = 255;  // the most a 256-byte-aligned take wastes

// run_mla: q, q_a (with q_lora), ckv, attn, the output gate (K3).
uint64_t mla_floats(uint64_t heads, uint64_t nope, uint64_t rope, uint64_t v, uint64_t q_lora, uint64_t kv_lora, bool gate) {
  return heads * (nope + rope) + q_lora + kv_lora + rope + heads * v + (gate ? heads * v : 0);
}
constexpr uint64_t kMlaTakes = 5;

// route_and_request: router logits [n, experts], ids and weights [n, k], the lookahead's ids and
// weights [n, k]; prepare_experts: lists [union <= experts, n], hidden [n*k, width], y [n*k, in].
uint64_t routed_floats(uint64_t experts, uint64_t k, uint64_t width, uint64_t in) {
  return experts + 4 * k + experts + k * width + k * in;
}
constexpr uint64_t kRoutedTakes = 10;
// The union's ids and counts, [union, 1] each.
uint64_t routed_fixed(uint64_t experts) { return 4 * 2 * experts; }

// CPU expert_ffn: an expert's gathered rows and results, at most n rows of x, gate, up and y.
uint64_t expert_rows_floats(uint64_t width, uint64_t in) { return 2 * in + 2 * width; }

}  // namespace

PassActivations k2_pass_activations(const ModelConfig& c) {
  const uint64_t h = c.hidden_size, E = c.n_routed_experts, k = c.num_experts_per_tok, w = c.moe_intermediate_size;
  const uint64_t shared = w * c.n_shared_experts;
  bool any_moe = false, any_dense = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) (c.is_moe_layer(l) ? any_moe : any_dense) = true;
  const uint64_t attn = mla_floats(c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
                                   c.q_lora_rank, c.kv_lora_rank, false);
  // K2Model::moe: the shared MLP's gate and up, the routed sum [n, hidden], the routed op.
  const uint64_t moe = any_moe ? (shared ? 2 * shared + h : 0) + routed_floats(E, k, w, h) : 0;
  const uint64_t dense = any_dense ? 2 * static_cast<uint64_t>(c.intermediate_size) : 0;
  PassActivations a;
  a.pass_per_position = 4 * (3 * h + 1);  // x, normed, delta; the token ids
  a.layer_per_position = 4 * (attn + std::max(moe, dense));
  a.layer_fixed = any_moe ? routed_fixed(E) : 0;
  a.logits_row = 4 * static_cast<uint64_t>(c.vocab_size);
  a.alignment = kAlign * (4 + kMlaTakes + 3 + kRoutedTakes + 1);
  a.workspace_per_position = any_moe ? 4 * expert_rows_floats(w, h) : 0;
  return a;
}

PassActivations k3_pass_activations(const K3Config& c) {
  const uint64_t h = c.hidden_size, E = c.num_experts, k = c.num_experts_per_token, w = c.moe_intermediate_size;
  const uint64_t lat = c.latent_size, shared = w * c.num_shared_experts;
  const uint64_t ch = c.kda_heads * c.kda_head_dim, heads = c.kda_heads, hd = c.kda_head_dim;
  bool any_moe = false, any_dense = false, any_kda = false, any_mla = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    (c.is_moe_layer(l) ? any_moe : any_dense) = true;
    (c.is_mla[l] ? any_mla : any_kda) = true;
  }
  // K3Model::kda: q, k, v, decay, gate, out [n, ch], beta [n, heads], the decay's low rank [n, head_dim].
  const uint64_t kda = any_kda ? 6 * ch + heads + hd : 0;
  const uint64_t mla = any_mla ? mla_floats(c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
                                            c.q_lora_rank, c.kv_lora_rank, c.mla_output_gate)
                               : 0;
  // K3Model::moe: z and the routed result [n, latent], up [n, hidden], the shared MLP's gate and
  // up, the routed op over the latent.
  const uint64_t moe = any_moe ? 2 * lat + h + 2 * shared + routed_floats(E, k, w, lat) : 0;
  const uint64_t dense = any_dense ? 2 * static_cast<uint64_t>(c.intermediate_size) : 0;
  const uint64_t blocks = c.attn_res_block_size > 0 ? (c.num_hidden_layers + c.attn_res_block_size - 1) / c.attn_res_block_size : 0;
  PassActivations a;
  a.pass_per_position = 4 * ((blocks + 4) * h + 1);  // the sealed blocks, partial, mixed, normed, delta; the token ids
  a.layer_per_position = 4 * (std::max(kda, mla) + std::max(moe, dense));
  a.layer_fixed = any_moe ? routed_fixed(E) : 0;
  a.logits_row = 4 * static_cast<uint64_t>(c.vocab_size);
  a.alignment = kAlign * (blocks + 5 + 8 + 5 + kRoutedTakes + 1);
  // KDA's convolved inputs (CPU: q, k, v, decay [n, ch] and beta [n, heads]; CUDA: 3 [n, ch])
  // beside the CPU expert op's rows.
  a.workspace_per_position = 4 * ((any_kda ? std::max(4 * ch + heads, 3 * ch) : 0) + (any_moe ? expert_rows_floats(w, lat) : 0));
  return a;
}

}  // namespace deltafin
