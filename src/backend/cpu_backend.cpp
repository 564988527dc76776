// The CPU backend: the reference for every other backend and the default everywhere.
// Work is split over output rows (matmul) or heads (attention), never inside a reduction, so
// results do not depend on the thread count.
#include <algorithm>
#include <thread>

#include "backend/backend.hpp"
#include "cpu/k3_ops.hpp"
#include "cpu/matmul.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/vec_ops.hpp"

namespace deltafin {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}

  const char* name() const override { return "cpu"; }
  int threads() const override { return pool_.size(); }

  void matmul(const WeightView& w, const float* x, int64_t n_pos, float* y) override {
    // Rows in chunks of 16 so that each worker streams whole cache lines of the weights.
    constexpr int64_t kChunk = 16;
    const int64_t chunks = (w.rows + kChunk - 1) / kChunk;
    if (chunks < 4 || w.rows * w.cols < 65536) {
      cpu::matmul_rows(w, x, w.cols, n_pos, y, w.rows, 0, w.rows);
      return;
    }
    pool_.parallel_for(chunks, [&](int64_t begin, int64_t end) {
      cpu::matmul_rows(w, x, w.cols, n_pos, y, w.rows, begin * kChunk, std::min(end * kChunk, w.rows));
    });
  }

  void rmsnorm(const float* x, const float* weight, int64_t n_pos, int64_t dim, float eps, float* out) override {
    for (int64_t t = 0; t < n_pos; ++t) cpu::rmsnorm(x + t * dim, weight, dim, eps, out + t * dim);
  }

  void silu_mul(float* gate, const float* up, int64_t n) override { cpu::silu_mul(gate, up, n); }

  void axpy(float alpha, const float* x, float* y, int64_t n) override { cpu::axpy(alpha, x, y, n); }

  void embed(const WeightView& table, int64_t row, float* out) override { cpu::dequantize_row(table, row, out); }

  void mla_attention(const cpu::MlaShape& s, const WeightView& kv_b, const float* q, const float* cache_c,
                     const float* cache_pe, int64_t n_ctx, float* out) override {
    pool_.parallel_for(s.heads, [&](int64_t begin, int64_t end) {
      cpu::mla_attention(s, kv_b, q, cache_c, cache_pe, n_ctx, out, begin, end);
    });
  }

  void situ_mul(float* gate, const float* up, int64_t n, float beta, float linear_beta) override {
    cpu::situ_mul(gate, up, n, beta, linear_beta);
  }

  void short_conv_silu(const float* w, float* window, const float* u, int64_t n, int64_t channels, int64_t taps,
                       float* y) override {
    cpu::short_conv_silu(w, window, u, n, channels, taps, y);
  }

  void kda_step(float* state, const float* q, const float* k, const float* v, const float* alpha, const float* beta,
                int64_t heads, int64_t key_dim, int64_t value_dim, float* o) override {
    pool_.parallel_for(heads, [&](int64_t begin, int64_t end) {
      cpu::kda_step(state, q, k, v, alpha, beta, key_dim, value_dim, o, begin, end);
    });
  }

  void attn_res_mix(const float* const* candidates, int64_t m, const float* w, int64_t dim, float eps,
                    float* out) override {
    cpu::attn_res_mix(candidates, m, w, dim, eps, out);
  }

 private:
  cpu::ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace deltafin
