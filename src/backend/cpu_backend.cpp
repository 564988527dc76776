// The CPU backend: the reference for every other backend and the default everywhere. Buffers
// are host memory; every op runs when it is enqueued, so fences pass at once. Work is split over
// output rows (matmul) or heads (attention, the delta rule), never inside a reduction, so
// results do not depend on the thread count; ops too small to share run on the calling thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/k3_ops.hpp"
#include "cpu/matmul.hpp"
#include "cpu/mla_attention.hpp"
#include "cpu/rope.hpp"
#include "cpu/router.hpp"
#include "cpu/simd_target.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/vec_ops.hpp"
#include "util/aligned_buffer.hpp"
#include "util/cpus_available.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(AlignedBuffer memory) : Buffer(memory.size(), memory.data()), memory_(std::move(memory)) {}
  HostBuffer(std::byte* host, uint64_t bytes) : Buffer(bytes, host) {}

 private:
  AlignedBuffer memory_;  // empty for wrapped memory
};

// Row r of a host tensor.
float* row(const Tensor& t, int64_t r) { return t.f32() + r * t.stride; }

// An op of fewer multiply-adds than this runs on the calling thread alone: handing it out costs
// more than it saves, and on a busy machine a worker may be descheduled while it holds a chunk
// (k3-public-bench/results/busy-machine.md).
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}

  const char* name() const override { return "cpu"; }
  std::string describe() const override {
    return fmt::format("cpu ({}, {} thread{})", cpu::simd_current(), pool_.size(), pool_.size() == 1 ? "" : "s");
  }
  int threads() const override { return pool_.size(); }

  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    return std::make_unique<HostBuffer>(AlignedBuffer(std::max<uint64_t>(bytes, 1)));
  }
  std::unique_ptr<Buffer> allocate_slots(uint64_t bytes) override {
    return std::make_unique<HostBuffer>(AlignedBuffer(std::max<uint64_t>(bytes, 1), 2 << 20));
  }
  std::unique_ptr<Buffer> allocate_host(uint64_t bytes) override { return allocate_slots(bytes); }
  std::unique_ptr<Buffer> wrap(std::byte* host, uint64_t bytes) override { return std::make_unique<HostBuffer>(host, bytes); }
  void upload(const void* src, Buffer& dst, uint64_t offset, uint64_t bytes) override {
    std::memcpy(dst.host() + offset, src, bytes);
  }
  void upload_slot(const Buffer& staging, uint64_t staging_offset, Buffer& slots, uint64_t offset,
                   uint64_t bytes) override {
    std::memcpy(slots.host() + offset, staging.host() + staging_offset, bytes);
  }
  void download(const Tensor& src, void* dst) override {
    const size_t row_bytes = static_cast<size_t>(src.cols) * 4;
    for (int64_t r = 0; r < src.rows; ++r)
      std::memcpy(static_cast<std::byte*>(dst) + r * row_bytes, src.buffer->host() + src.offset + r * src.stride * 4, row_bytes);
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    for (int64_t r = 0; r < src.rows; ++r)
      std::memmove(dst.buffer->host() + dst.offset + r * dst.stride * 4, src.buffer->host() + src.offset + r * src.stride * 4,
                   static_cast<size_t>(src.cols) * 4);
  }
  void fill(const Tensor& dst, float value) override {
    for (int64_t r = 0; r < dst.rows; ++r) std::fill_n(row(dst, r), dst.cols, value);
  }

  Fence commit() override { return ++fence_; }
  void wait(Fence) override {}

  void matmul(const Weight& weight, const Tensor& x, const Tensor& y) override {
    matmul_rows(weight.host_view(), x.f32(), x.stride, x.rows, y.f32(), y.stride);
  }

  void embed(const Weight& table, const Tensor& ids, const Tensor& out) override {
    const WeightView w = table.host_view();
    for (int64_t t = 0; t < ids.rows; ++t) cpu::dequantize_row(w, ids.i32()[t * ids.stride], row(out, t));
  }

  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    for (int64_t t = 0; t < x.rows; ++t) cpu::rmsnorm(row(x, t), weight.f32(), x.cols, eps, row(out, t));
  }

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    for (int64_t t = 0; t < a.rows; ++t) {
      const float *pa = row(a, t), *pb = row(b, t);
      float* po = row(out, t);
      for (int64_t i = 0; i < a.cols; ++i) po[i] = pa[i] + pb[i];
    }
  }

  void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& out) override {
    for (int64_t t = 0; t < x.rows; ++t) {
      const float *px = row(x, t), *pg = row(gate, t);
      float* po = row(out, t);
      for (int64_t i = 0; i < x.cols; ++i) po[i] = px[i] * (1.0f / (1.0f + std::exp(-pg[i])));
    }
  }

  void gated(const GatedActivation& act, const Tensor& gate, const Tensor& up, const Tensor& out) override {
    for (int64_t t = 0; t < gate.rows; ++t) {
      if (out.f32() != gate.f32()) std::copy_n(row(gate, t), gate.cols, row(out, t));
      if (act.kind == GatedActivation::kSiLU) cpu::silu_mul(row(out, t), row(up, t), gate.cols);
      else cpu::situ_mul(row(out, t), row(up, t), gate.cols, act.beta, act.linear_beta);
    }
  }

  void rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const Tensor& inv_freq,
            float attention_factor, int64_t start) override {
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t h = 0; h < heads; ++h)
        cpu::rope_interleaved(row(x, t) + h * head_dim + offset, inv_freq.f32(), inv_freq.cols, attention_factor, start + t);
  }

  void mla_attention(const MlaShape& s, const Weight& kv_b, const Tensor& q, const Tensor& cache_c,
                     const Tensor& cache_pe, int64_t start, const Tensor& out) override {
    const WeightView w = kv_b.host_view();
    for (int64_t t = 0; t < q.rows; ++t) {
      const int64_t n_ctx = start + t + 1;
      split(s.heads, s.heads * (n_ctx * (s.kv_lora + s.rope + s.kv_lora) + s.kv_lora * (s.nope + s.v)),
            [&](int64_t begin, int64_t end) {
              cpu::mla_attention(s, w, row(q, t), cache_c.f32(), cache_pe.f32(), n_ctx, row(out, t), begin, end);
            });
    }
  }

  void kda(const KdaArgs& a) override {
    const int64_t n = a.q.rows, ch = a.heads * a.head_dim, window = (a.taps - 1) * ch;
    std::vector<float> q(n * ch), k(n * ch), v(n * ch), beta(n * a.heads), decay(n * ch);  // [n, ch], [n, heads]
    cpu::short_conv_silu(a.conv_q.f32(), a.window.f32(), a.q.f32(), n, ch, a.taps, q.data());
    cpu::short_conv_silu(a.conv_k.f32(), a.window.f32() + window, a.k.f32(), n, ch, a.taps, k.data());
    cpu::short_conv_silu(a.conv_v.f32(), a.window.f32() + 2 * window, a.v.f32(), n, ch, a.taps, v.data());
    download(a.beta, beta.data());
    download(a.decay, decay.data());
    for (int64_t t = 0; t < n; ++t) {
      cpu::kda_prepare(q.data() + t * ch, k.data() + t * ch, beta.data() + t * a.heads, decay.data() + t * ch,
                       a.dt_bias.f32(), a.decay_rate.f32(), a.heads, a.head_dim, a.gate_lower_bound, a.norm_eps);
      split(a.heads, 4 * a.heads * a.head_dim * a.head_dim, [&](int64_t begin, int64_t end) {
        cpu::kda_step(a.state.f32(), q.data() + t * ch, k.data() + t * ch, v.data() + t * ch, decay.data() + t * ch,
                      beta.data() + t * a.heads, a.head_dim, a.head_dim, row(a.out, t), begin, end);
      });
    }
  }

  void attn_res_mix(std::span<const Tensor> candidates, const Tensor& query, float eps, const Tensor& out) override {
    std::vector<const float*> rows(candidates.size());
    for (int64_t t = 0; t < out.rows; ++t) {
      for (size_t i = 0; i < candidates.size(); ++i) rows[i] = row(candidates[i], t);
      cpu::attn_res_mix(rows.data(), static_cast<int64_t>(rows.size()), query.f32(), out.cols, eps, row(out, t));
    }
  }

  void route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, const Tensor& ids,
             const Tensor& weights) override {
    for (int64_t t = 0; t < logits.rows; ++t)
      cpu::route_token(spec, row(logits, t), bias.buffer ? bias.f32() : nullptr, ids.i32() + t * ids.stride, row(weights, t));
  }

  void expert_slots(const Tensor& ids, const Tensor& experts, const Tensor& lists, const Tensor& counts) override {
    const int64_t n = ids.rows, k = ids.cols, count = experts.rows;
    const int32_t* union_ids = experts.i32();
    for (int64_t e = 0; e < count; ++e) counts.i32()[e * counts.stride] = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int32_t id = ids.i32()[t * ids.stride + j];
        const int32_t* at = std::lower_bound(union_ids, union_ids + count, id);
        if (at == union_ids + count || *at != id) fail("expert_slots: expert {} of row {} is not in the union", id, t);
        const int64_t e = at - union_ids;
        int32_t& used = counts.i32()[e * counts.stride];
        lists.i32()[e * lists.stride + used++] = static_cast<int32_t>(t * k + j);
      }
  }

  // Per expert: x's rows of its slots gathered, gate and up, the activation, down, and the rows
  // scattered to y by slot (hidden is not needed: the activations stay in gate_).
  void expert_ffn(std::span<const ResidentExpert> batch, const Tensor& x, const Tensor& lists, const Tensor& counts,
                  const GatedActivation& act, const Tensor& hidden, const Tensor& y) override {
    const int64_t in = x.cols, width = hidden.cols, k = x.rows > 0 ? y.rows / x.rows : 1;
    for (const ResidentExpert& e : batch) {
      const int32_t* slots = lists.i32() + e.list * lists.stride;
      const int64_t m = counts.i32()[e.list * counts.stride];
      xs_.resize(m * in), gate_.resize(m * width), up_.resize(m * width), ys_.resize(m * in);
      for (int64_t r = 0; r < m; ++r) std::copy_n(row(x, slots[r] / k), in, xs_.data() + r * in);
      matmul_rows(e.proj[0].host_view(), xs_.data(), in, m, gate_.data(), width);
      matmul_rows(e.proj[1].host_view(), xs_.data(), in, m, up_.data(), width);
      if (act.kind == GatedActivation::kSiLU) cpu::silu_mul(gate_.data(), up_.data(), m * width);
      else cpu::situ_mul(gate_.data(), up_.data(), m * width, act.beta, act.linear_beta);
      matmul_rows(e.proj[2].host_view(), gate_.data(), width, m, ys_.data(), in);
      for (int64_t r = 0; r < m; ++r) std::copy_n(ys_.data() + r * in, in, row(y, slots[r]));
    }
  }

  void expert_combine(const Tensor& ids, const Tensor& weights, const Tensor& y, const Tensor& out) override {
    const int64_t k = ids.cols;
    std::vector<int64_t> order(k);
    for (int64_t t = 0; t < out.rows; ++t) {
      const int32_t* chosen = ids.i32() + t * ids.stride;
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return chosen[a] < chosen[b]; });
      std::fill_n(row(out, t), out.cols, 0.0f);
      for (int64_t j : order) cpu::axpy(row(weights, t)[j], row(y, t * k + j), row(out, t), out.cols);
    }
  }

  // Every op has run when it returns: the pin's fence has passed.
  void hold_until(Fence, std::shared_ptr<const void>) override {}

 private:
  // y [n, w.rows] = x [n, w.cols] . W^T, rows x_stride and y_stride floats apart. Output rows
  // in chunks of 16, so that each worker streams whole cache lines of the weights.
  void matmul_rows(const WeightView& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride) {
    constexpr int64_t kChunk = 16;
    const int64_t chunks = (w.rows + kChunk - 1) / kChunk;
    if (chunks < 4 || w.rows * w.cols * n < kMinParallelWork)
      return cpu::matmul_rows(w, x, x_stride, n, y, y_stride, 0, w.rows);
    pool_.parallel_for(chunks, [&](int64_t begin, int64_t end) {
      cpu::matmul_rows(w, x, x_stride, n, y, y_stride, begin * kChunk, std::min(end * kChunk, w.rows));
    });
  }

  // fn(begin, end) over [0, n) on the pool, or at once on this thread when `work` (multiply-adds)
  // is too little to share.
  template <class Fn>
  void split(int64_t n, int64_t work, const Fn& fn) {
    if (work < kMinParallelWork) return fn(0, n);
    pool_.parallel_for(n, fn);
  }

  cpu::ThreadPool pool_;
  Fence fence_ = 0;
  std::vector<float> xs_, gate_, up_, ys_;  // expert_ffn's gathered rows and results, reused
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  if (threads <= 0) threads = cpus_available();
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace deltafin
