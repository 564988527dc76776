// The op set every backend implements (CPU now; Metal and CUDA later), behind one interface.
// The model calls only these; backends are checked against the CPU reference one op at a time.
// Activations are fp32 row-major; weights are WeightViews in their stored formats.
// Every op is batch-invariant: row t of a multi-position call equals a one-position call on row t.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "cpu/k3_ops.hpp"
#include "cpu/mla_attention.hpp"
#include "cpu/weight_view.hpp"

namespace deltafin {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int threads() const = 0;

  // y [n_pos, w.rows] = x [n_pos, w.cols] . W^T
  virtual void matmul(const WeightView& w, const float* x, int64_t n_pos, float* y) = 0;
  // out [n_pos, dim] = rmsnorm(x [n_pos, dim]) * weight [dim]; out may alias x.
  virtual void rmsnorm(const float* x, const float* weight, int64_t n_pos, int64_t dim, float eps, float* out) = 0;
  // gate [n] = silu(gate) * up
  virtual void silu_mul(float* gate, const float* up, int64_t n) = 0;
  // y [n] += alpha * x
  virtual void axpy(float alpha, const float* x, float* y, int64_t n) = 0;
  // out [dim] = row `row` of the embedding table, dequantized.
  virtual void embed(const WeightView& table, int64_t row, float* out) = 0;
  // MLA attention of one query over n_ctx cached positions (see cpu/mla_attention.hpp).
  virtual void mla_attention(const cpu::MlaShape& s, const WeightView& kv_b, const float* q,
                             const float* cache_c, const float* cache_pe, int64_t n_ctx, float* out) = 0;

  // Kimi K3 ops (see cpu/k3_ops.hpp).
  virtual void situ_mul(float* gate, const float* up, int64_t n, float beta, float linear_beta) = 0;
  virtual void short_conv_silu(const float* w, float* window, const float* u, int64_t n, int64_t channels,
                               int64_t taps, float* y) = 0;
  // One token of the KDA delta rule over all heads; state [heads, key_dim, value_dim].
  virtual void kda_step(float* state, const float* q, const float* k, const float* v, const float* alpha,
                        const float* beta, int64_t heads, int64_t key_dim, int64_t value_dim, float* o) = 0;
  virtual void attn_res_mix(const float* const* candidates, int64_t m, const float* w, int64_t dim, float eps,
                            float* out) = 0;
};

// The CPU backend with `threads` workers (0: one per hardware thread).
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace deltafin
