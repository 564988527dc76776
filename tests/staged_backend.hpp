// A CPU backend whose expert slot pool the host cannot address, as on a discrete GPU: the store
// must stage every read in host memory and upload it (Backend::upload_slot), and the expert op
// reads the slots through a wrap of their hidden memory. Everything else runs on the CPU
// backend, so the staged path can be checked bit for bit against the plain one on any machine.
#pragma once

#include <atomic>
#include <cstring>
#include <memory>

#include "backend/backend.hpp"
#include "util/aligned_buffer.hpp"
#include "util/error.hpp"

namespace deltafin::test {

class StagedBackend final : public Backend {
 public:
  explicit StagedBackend(int threads) : cpu_(make_cpu_backend(threads)) {}

  std::atomic<uint64_t> uploads{0};  // upload_slot calls

  const char* name() const override { return "cpu-staged"; }
  int threads() const override { return cpu_->threads(); }

  std::unique_ptr<Buffer> allocate(uint64_t bytes) override { return cpu_->allocate(bytes); }
  std::unique_ptr<Buffer> allocate_slots(uint64_t bytes) override {
    auto slots = std::make_unique<HiddenBuffer>(bytes);
    slots_ = slots.get();
    slots_view_ = cpu_->wrap(slots->memory.data(), bytes);
    return slots;
  }
  std::unique_ptr<Buffer> allocate_host(uint64_t bytes) override { return cpu_->allocate_host(bytes); }
  std::unique_ptr<Buffer> wrap(std::byte* host, uint64_t bytes) override { return cpu_->wrap(host, bytes); }
  void upload(const void* src, Buffer& dst, uint64_t offset, uint64_t bytes) override {
    if (&dst == slots_) fail("upload() into the slot pool: records must come through upload_slot()");
    cpu_->upload(src, dst, offset, bytes);
  }
  void upload_slot(const Buffer& staging, uint64_t staging_offset, Buffer& slots, uint64_t offset,
                   uint64_t bytes) override {
    if (&slots != slots_ || !staging.host() || offset + bytes > slots.bytes()) fail("upload_slot: bad arguments");
    std::memcpy(slots_->memory.data() + offset, staging.host() + staging_offset, bytes);
    ++uploads;
  }
  void download(const Tensor& src, void* dst) override { cpu_->download(src, dst); }
  void copy(const Tensor& src, const Tensor& dst) override { cpu_->copy(src, dst); }
  void fill(const Tensor& dst, float value) override { cpu_->fill(dst, value); }
  Fence commit() override { return cpu_->commit(); }
  void wait(Fence fence) override { cpu_->wait(fence); }

  void matmul(const Weight& w, const Tensor& x, const Tensor& y) override { cpu_->matmul(w, x, y); }
  void embed(const Weight& table, const Tensor& ids, const Tensor& out) override { cpu_->embed(table, ids, out); }
  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    cpu_->rmsnorm(x, weight, eps, out);
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override { cpu_->add(a, b, out); }
  void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& out) override { cpu_->mul_sigmoid(x, gate, out); }
  void gated(const GatedActivation& act, const Tensor& gate, const Tensor& up, const Tensor& out) override {
    cpu_->gated(act, gate, up, out);
  }
  void rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const Tensor& inv_freq,
            float attention_factor, int64_t start) override {
    cpu_->rope(x, heads, head_dim, offset, inv_freq, attention_factor, start);
  }
  void mla_attention(const MlaShape& shape, const Weight& kv_b, const Tensor& q, const Tensor& cache_c,
                     const Tensor& cache_pe, int64_t start, const Tensor& out) override {
    cpu_->mla_attention(shape, kv_b, q, cache_c, cache_pe, start, out);
  }
  void kda(const KdaArgs& args) override { cpu_->kda(args); }
  void attn_res_mix(std::span<const Tensor> candidates, const Tensor& query, float eps, const Tensor& out) override {
    cpu_->attn_res_mix(candidates, query, eps, out);
  }
  void route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, const Tensor& ids,
             const Tensor& weights) override {
    cpu_->route(spec, logits, bias, ids, weights);
  }
  // The experts' weights, moved from the hidden pool onto its host view.
  void routed_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const int32_t> experts,
                      ExpertSource& source, int64_t width, const GatedActivation& act, const Tensor& out) override {
    struct Viewed final : ExpertSource {
      ExpertSource& inner;
      Buffer *hidden, *view;
      Viewed(ExpertSource& s, Buffer* h, Buffer* v) : inner(s), hidden(h), view(v) {}
      Resident acquire(int32_t expert) override { return viewed(inner.acquire(expert), expert); }
      size_t acquire_next(std::span<const int32_t> pending, Resident& out) override {
        const size_t i = inner.acquire_next(pending, out);
        out = viewed(std::move(out), pending[i]);
        return i;
      }
      Resident viewed(Resident r, int32_t expert) const {
        for (Weight& w : r.proj) {
          if (w.data != hidden || (w.scales && w.scales != hidden)) fail("expert {}: weights outside the slot pool", expert);
          w.data = view;
          if (w.scales) w.scales = view;
        }
        return r;
      }
      int64_t capacity() const override { return inner.capacity(); }
    } viewed(source, slots_, slots_view_.get());
    cpu_->routed_experts(x, ids, weights, experts, viewed, width, act, out);
  }

 private:
  struct HiddenBuffer final : Buffer {
    explicit HiddenBuffer(uint64_t bytes) : Buffer(bytes, nullptr), memory(bytes, 2 << 20) {}
    AlignedBuffer memory;
  };
  std::unique_ptr<Backend> cpu_;
  HiddenBuffer* slots_ = nullptr;
  std::unique_ptr<Buffer> slots_view_;
};

}  // namespace deltafin::test
