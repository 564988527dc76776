// Absorbed MLA attention (see mla_attention.hpp) and its decompressing reference twin.
#include "cpu/mla_attention.hpp"

#include <algorithm>
#include <vector>

#include "cpu/matmul.hpp"
#include "cpu/vec_ops.hpp"

namespace deltafin::cpu {

void mla_attention(const MlaShape& s, const WeightView& kv_b, const float* q, const float* cache_c,
                   const float* cache_pe, int64_t n_ctx, float* out, int64_t head_begin, int64_t head_end) {
  std::vector<float> q_lat(s.kv_lora), row(s.kv_lora), o_lat(s.kv_lora), scores(n_ctx), kv_rows(kv_b.rows);
  const int64_t qk = s.nope + s.rope;
  for (int64_t h = head_begin; h < head_end; ++h) {
    const float* q_nope = q + h * qk;
    const float* q_pe = q_nope + s.nope;
    const int64_t uk_row = h * (s.nope + s.v);
    // q_lat = W_UK_h^T q_nope, summed over d in index order.
    std::fill(q_lat.begin(), q_lat.end(), 0.0f);
    for (int64_t d = 0; d < s.nope; ++d) {
      dequantize_row(kv_b, uk_row + d, row.data());
      axpy(q_nope[d], row.data(), q_lat.data(), s.kv_lora);
    }
    for (int64_t j = 0; j < n_ctx; ++j)
      scores[j] = (dot(q_lat.data(), cache_c + j * s.kv_lora, s.kv_lora) +
                   dot(q_pe, cache_pe + j * s.rope, s.rope)) * s.scale;
    softmax(scores.data(), n_ctx);
    std::fill(o_lat.begin(), o_lat.end(), 0.0f);
    for (int64_t j = 0; j < n_ctx; ++j) axpy(scores[j], cache_c + j * s.kv_lora, o_lat.data(), s.kv_lora);
    // out_h = W_UV_h o_lat: rows [uk_row + nope, uk_row + nope + v) of kv_b.
    const int64_t uv_row = uk_row + s.nope;
    matmul_rows(kv_b, o_lat.data(), s.kv_lora, 1, kv_rows.data(), 0, uv_row, uv_row + s.v);
    std::copy(kv_rows.begin() + uv_row, kv_rows.begin() + uv_row + s.v, out + h * s.v);
  }
}

void mla_attention_ref(const MlaShape& s, const WeightView& kv_b, const float* q, const float* cache_c,
                       const float* cache_pe, int64_t n_ctx, float* out, int64_t head_begin, int64_t head_end) {
  const int64_t qk = s.nope + s.rope, per_head = s.nope + s.v;
  std::vector<float> kv(n_ctx * kv_b.rows), scores(n_ctx);
  // kv[j] = kv_b c(j): per head, k_nope then v.
  matmul_rows_ref(kv_b, cache_c, s.kv_lora, n_ctx, kv.data(), kv_b.rows, 0, kv_b.rows);
  for (int64_t h = head_begin; h < head_end; ++h) {
    const float* q_nope = q + h * qk;
    const float* q_pe = q_nope + s.nope;
    for (int64_t j = 0; j < n_ctx; ++j) {
      const float* k_nope = kv.data() + j * kv_b.rows + h * per_head;
      scores[j] = (dot_ref(q_nope, k_nope, s.nope) + dot_ref(q_pe, cache_pe + j * s.rope, s.rope)) * s.scale;
    }
    softmax_ref(scores.data(), n_ctx);
    for (int64_t i = 0; i < s.v; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n_ctx; ++j) acc += scores[j] * kv[j * kv_b.rows + h * per_head + s.nope + i];
      out[h * s.v + i] = acc;
    }
  }
}

}  // namespace deltafin::cpu
