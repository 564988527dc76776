// Mlp and Mla blocks (see blocks.hpp).
#include "model/blocks.hpp"

#include "util/error.hpp"

namespace deltafin {

Tensor upload_tokens(Backend& backend, Scratch& scratch, const int32_t* tokens, int64_t n, int64_t vocab) {
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= vocab) fail("token id {} is outside the vocabulary (0..{})", tokens[t], vocab - 1);
  const Tensor ids = scratch.take(n, 1, Elem::I32);
  backend.upload(tokens, *ids.buffer, ids.offset, 4 * static_cast<uint64_t>(n));
  return ids;
}

void project_logits(Backend& backend, Scratch& scratch, const Weight& lm_head, const Tensor& normed, bool all_logits,
                    float* logits) {
  const int64_t first = all_logits ? 0 : normed.rows - 1;
  const Tensor out = scratch.take(normed.rows - first, lm_head.rows);  // [rows, vocab]
  backend.matmul(lm_head, normed.row_range(first, normed.rows - first), out);
  backend.download(out, logits);
}

Mlp load_mlp(SpineLoader& loader, const std::string& prefix, int64_t width, int64_t hidden) {
  return {loader.matrix(prefix + "gate_proj", width, hidden), loader.matrix(prefix + "up_proj", width, hidden),
          loader.matrix(prefix + "down_proj", hidden, width)};
}

void run_mlp(Backend& backend, Scratch& scratch, const Mlp& mlp, const GatedActivation& act, const Tensor& x,
             const Tensor& out) {
  const int64_t n = x.rows, width = mlp.gate.weight.rows;
  const Tensor gate = scratch.take(n, width), up = scratch.take(n, width);  // [n, width]
  backend.matmul(mlp.gate.weight, x, gate);
  backend.matmul(mlp.up.weight, x, up);
  backend.gated(act, gate, up, gate);
  backend.matmul(mlp.down.weight, gate, out);
}

MlaWeights load_mla(SpineLoader& loader, const std::string& p, const MlaSpec& spec) {
  const MlaShape& s = spec.shape;
  const int64_t h = spec.input > 0 ? spec.input : spec.hidden, qk = s.nope + s.rope;
  MlaWeights w;
  if (spec.q_lora > 0) {
    w.q_a = loader.matrix(p + "q_a_proj", spec.q_lora, h);
    w.q_a_norm = loader.vector(p + "q_a_layernorm.weight", spec.q_lora);
    w.q_b = loader.matrix(p + "q_b_proj", s.heads * qk, spec.q_lora);
  } else {
    w.q_proj = loader.matrix(p + "q_proj", s.heads * qk, h);
  }
  w.kv_a = loader.matrix(p + "kv_a_proj_with_mqa", s.kv_lora + s.rope, h);
  w.kv_a_norm = loader.vector(p + "kv_a_layernorm.weight", s.kv_lora);
  w.kv_b = loader.matrix(p + "kv_b_proj", s.heads * (s.nope + s.v), s.kv_lora);
  if (spec.output_gate) w.g = loader.matrix(p + "g_proj", s.heads * s.v, h);
  w.o = loader.matrix(p + "o_proj", spec.hidden, s.heads * s.v);
  return w;
}

void write_latent(Backend& backend, const MlaSpec& spec, const MlaWeights& w, LatentKvCache& cache, int64_t layer,
                  const Tensor& ckv, int64_t start) {
  const MlaShape& s = spec.shape;
  const int64_t n = ckv.rows;
  const Tensor c = cache.c(layer).row_range(start, n), pe = cache.pe(layer).row_range(start, n);
  backend.rmsnorm(ckv.col_range(0, s.kv_lora), w.kv_a_norm.tensor, spec.norm_eps, c);
  backend.copy(ckv.col_range(s.kv_lora, s.rope), pe);
  if (spec.inv_freq) backend.rope(pe, 1, s.rope, 0, *spec.inv_freq, spec.attention_factor, start);
}

void run_mla(Backend& backend, Scratch& scratch, const MlaSpec& spec, const MlaWeights& w, LatentKvCache& cache,
             int64_t layer, const Tensor& x, int64_t start, const Tensor& out, int64_t visible) {
  const MlaShape& s = spec.shape;
  const int64_t n = x.rows, qk = s.nope + s.rope;
  const Tensor q = scratch.take(n, s.heads * qk);  // [n, heads * (nope + rope)]
  if (spec.q_lora > 0) {
    const Tensor qa = scratch.take(n, spec.q_lora);  // [n, q_lora]
    backend.matmul(w.q_a.weight, x, qa);
    backend.rmsnorm(qa, w.q_a_norm.tensor, spec.norm_eps, qa);
    backend.matmul(w.q_b.weight, qa, q);
  } else {
    backend.matmul(w.q_proj.weight, x, q);
  }
  // The new cache rows: the normalised latent and the shared key part.
  const Tensor ckv = scratch.take(n, s.kv_lora + s.rope);  // [n, kv_lora + rope]
  backend.matmul(w.kv_a.weight, x, ckv);
  write_latent(backend, spec, w, cache, layer, ckv, start);
  if (spec.inv_freq) backend.rope(q, s.heads, qk, s.nope, *spec.inv_freq, spec.attention_factor, start);
  const Tensor attn = scratch.take(n, s.heads * s.v);  // [n, heads * v]
  if (visible <= 0) {
    backend.mla_attention(s, w.kv_b.weight, q, cache.c(layer), cache.pe(layer), start, attn);
  } else {  // every row over rows [0, visible): one query at a time, as if it sat at position visible - 1
    for (int64_t i = 0; i < n; ++i)
      backend.mla_attention(s, w.kv_b.weight, q.row_range(i, 1), cache.c(layer), cache.pe(layer), visible - 1,
                            attn.row_range(i, 1));
  }
  if (spec.output_gate) {
    const Tensor gate = scratch.take(n, s.heads * s.v);
    backend.matmul(w.g.weight, x, gate);
    backend.mul_sigmoid(attn, gate, attn);
  }
  backend.matmul(w.o.weight, attn, out);
}

}  // namespace deltafin
