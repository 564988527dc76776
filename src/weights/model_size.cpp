// Byte accounting from config.json (see model_size.hpp).
#include "weights/model_size.hpp"

#include <algorithm>

namespace deltafin {
namespace {

constexpr uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint64_t bf16(uint64_t rows, uint64_t cols) { return 2 * rows * cols; }
uint64_t block_fp8(uint64_t rows, uint64_t cols) { return rows * cols + 4 * ceil_div(rows, 128) * ceil_div(cols, 128); }
uint64_t int4_g32(uint64_t rows, uint64_t cols) { return 4 * rows * ceil_div(cols, 8) + 2 * rows * ceil_div(cols, 32); }
uint64_t mxfp4(uint64_t rows, uint64_t cols) { return rows * cols / 2 + rows * cols / 32; }

}  // namespace

ModelBytes k2_bytes_from_config(const ModelConfig& c) {
  const uint64_t h = c.hidden_size, heads = c.num_attention_heads;
  auto linear = [&](uint64_t rows, uint64_t cols) { return c.fp8_block_quantized ? block_fp8(rows, cols) : bf16(rows, cols); };
  ModelBytes b;
  b.spine = bf16(c.vocab_size, h) * (c.tie_word_embeddings ? 1 : 2) + 2 * h;
  b.parameters = c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + h;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    uint64_t attn = 0, params = 0;
    auto add = [&](uint64_t rows, uint64_t cols) { attn += linear(rows, cols); params += rows * cols; };
    if (c.q_lora_rank > 0) {
      add(c.q_lora_rank, h);
      add(heads * c.qk_head_dim(), c.q_lora_rank);
      attn += 2 * c.q_lora_rank;
      params += c.q_lora_rank;
    } else {
      add(heads * c.qk_head_dim(), h);
    }
    add(c.kv_lora_rank + c.qk_rope_head_dim, h);
    add(heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    add(h, heads * c.v_head_dim);
    attn += 2 * c.kv_lora_rank + 4 * h;  // kv_a_layernorm, two decoder norms
    params += c.kv_lora_rank + 2 * h;
    if (!c.is_moe_layer(l)) {
      add(c.intermediate_size, h);
      add(c.intermediate_size, h);
      add(h, c.intermediate_size);
    } else {
      const uint64_t shared = c.moe_intermediate_size * c.n_shared_experts, inter = c.moe_intermediate_size;
      if (shared) {
        add(shared, h);
        add(shared, h);
        add(h, shared);
      }
      attn += bf16(c.n_routed_experts, h) + 4 * c.n_routed_experts;  // router weight + f32 bias
      params += c.n_routed_experts * (h + 1);
      const uint64_t expert = c.int4_experts ? 2 * int4_g32(inter, h) + int4_g32(h, inter)
                                             : 2 * linear(inter, h) + linear(h, inter);
      b.routed += c.n_routed_experts * expert;
      b.routed_per_token += c.num_experts_per_tok * expert;
      params += c.n_routed_experts * 3 * inter * h;
    }
    b.spine += attn;
    b.parameters += params;
  }
  b.kv_per_position = static_cast<uint64_t>(c.num_hidden_layers) * (c.kv_lora_rank + c.qk_rope_head_dim) * sizeof(float);
  return b;
}

ModelBytes k3_bytes_from_config(const K3Config& c) {
  const uint64_t h = c.hidden_size, p = c.kda_heads * c.kda_head_dim, hd = c.kda_head_dim;
  const uint64_t mla_heads = c.num_attention_heads;
  ModelBytes b;
  uint64_t params = c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + 3 * h;  // + final norm, output AttnRes
  uint64_t spine = 2 * params;
  auto add = [&](uint64_t rows, uint64_t cols) { spine += bf16(rows, cols); params += rows * cols; };
  auto add_f32 = [&](uint64_t n) { spine += 4 * n; params += n; };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    add(6, h);  // input/post norms, two AttnRes norms and projections
    if (!c.is_mla[l]) {
      for (int i = 0; i < 4; ++i) add(p, h);  // q, k, v, g
      add(h, p);                              // o
      add(hd, h);                             // f_a
      add(p, hd);                             // f_b
      add(c.kda_heads, h);                    // b
      add_f32(3 * p * c.conv_kernel + p + c.kda_heads + hd);  // conv, dt_bias, A_log, o_norm
    } else {
      add(c.q_lora_rank, h);
      add(mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim), c.q_lora_rank);
      add(c.kv_lora_rank + c.qk_rope_head_dim, h);
      add(mla_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
      if (c.mla_output_gate) add(mla_heads * c.v_head_dim, h);
      add(h, mla_heads * c.v_head_dim);
      add(1, c.q_lora_rank + c.kv_lora_rank);
    }
    if (!c.is_moe_layer(l)) {
      add(2 * c.intermediate_size, h);
      add(h, c.intermediate_size);
      continue;
    }
    const uint64_t shared = c.moe_intermediate_size * c.num_shared_experts, lat = c.latent_size;
    const uint64_t inter = c.moe_intermediate_size;
    add(c.num_experts, h);
    add_f32(c.num_experts);
    add(lat, h);
    add(h, lat);
    add(1, lat);
    if (shared) {
      add(2 * shared, h);
      add(h, shared);
    }
    const uint64_t expert = c.mxfp4_experts ? 2 * mxfp4(inter, lat) + mxfp4(lat, inter) : 3 * bf16(inter, lat);
    b.routed += c.num_experts * expert;
    b.routed_per_token += c.num_experts_per_token * expert;
    params += c.num_experts * 3 * inter * lat;
  }
  b.spine = spine;
  b.parameters = params;
  const uint64_t mla = std::count(c.is_mla.begin(), c.is_mla.end(), true), kda = c.num_hidden_layers - mla;
  b.kv_per_position = mla * (c.kv_lora_rank + c.qk_rope_head_dim) * sizeof(float);
  b.recurrent_state = kda * (p * hd + 3 * (c.conv_kernel - 1) * p) * sizeof(float);
  return b;
}

}  // namespace deltafin
