// Multi-head latent attention (MLA) of one query position over a compressed latent cache.
//
// The cache holds, per past position s, the normalised latent c(s) [kv_lora] and the rotated
// shared key k_pe(s) [rope]. The absorbed form folds kv_b_proj's K half into the query and its
// V half into the output, so the per-head keys and values are never materialised:
//   q_lat_h = W_UK_h^T q_nope_h                       [kv_lora]
//   p_h(s)  = softmax_s((q_lat_h . c(s) + q_pe_h . k_pe(s)) * scale)
//   out_h   = W_UV_h sum_s p_h(s) c(s)                [v]
// where kv_b_proj [heads*(nope+v), kv_lora] holds, per head, nope rows of W_UK then v rows of W_UV.
// The reference twin decompresses k_nope/v per head the textbook way (as transformers does).
#pragma once

#include <cstdint>

#include "cpu/weight_view.hpp"
#include "op_params.hpp"

namespace deltafin::cpu {

using deltafin::MlaShape;

// q: [heads, nope + rope] (rope part already rotated); cache_c: [n_ctx, kv_lora];
// cache_pe: [n_ctx, rope]; out: [heads, v]. Computes heads [head_begin, head_end).
void mla_attention(const MlaShape& s, const WeightView& kv_b, const float* q, const float* cache_c,
                   const float* cache_pe, int64_t n_ctx, float* out, int64_t head_begin, int64_t head_end);

void mla_attention_ref(const MlaShape& s, const WeightView& kv_b, const float* q, const float* cache_c,
                       const float* cache_pe, int64_t n_ctx, float* out, int64_t head_begin, int64_t head_end);

}  // namespace deltafin::cpu
