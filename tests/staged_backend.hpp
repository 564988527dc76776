// A CPU backend whose expert slot pool the host cannot address, as on a discrete GPU: the store
// must stage every read in host memory and upload it (Backend::upload_slot), and the expert op
// reads the slots through a wrap of their hidden memory. Everything else runs on the CPU
// backend, so the staged path can be checked bit for bit against the plain one on any machine.
// With a device pool (device_bytes > 0) it goes further and emulates CUDA's memory: every
// allocate() is hidden too, memory_pools() reports a host pool and a device pool of that size,
// and every op reads and writes the hidden buffers through their wraps, so the spine's loader
// and a spine streamed through device window slots take the device's path.
#pragma once

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "util/aligned_buffer.hpp"
#include "util/error.hpp"

namespace deltafin::test {

class StagedBackend final : public Backend {
 public:
  explicit StagedBackend(int threads, uint64_t device_bytes = 0) : cpu_(make_cpu_backend(threads)), device_bytes_(device_bytes) {}

  std::atomic<uint64_t> uploads{0};       // upload_slot calls into the slot pool
  std::atomic<uint64_t> other_uploads{0};  // upload_slot calls into other hidden buffers (device pool)

  const char* name() const override { return "cpu-staged"; }
  int threads() const override { return cpu_->threads(); }

  std::vector<MemoryPool> memory_pools() const override {
    if (!device_bytes_) return cpu_->memory_pools();
    return {host_memory_pool("host (pinned)"), MemoryPool{"device", false, device_bytes_, device_bytes_}};
  }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    if (!device_bytes_) return cpu_->allocate(bytes);
    return hidden(bytes);
  }
  std::unique_ptr<Buffer> allocate_slots(uint64_t bytes) override {
    auto slots = hidden(bytes);
    slots_ = slots.get();
    return slots;
  }
  std::unique_ptr<Buffer> allocate_host(uint64_t bytes) override { return cpu_->allocate_host(bytes); }
  std::unique_ptr<Buffer> wrap(std::byte* host, uint64_t bytes) override { return cpu_->wrap(host, bytes); }
  void upload(const void* src, Buffer& dst, uint64_t offset, uint64_t bytes) override {
    if (&dst == slots_) fail("upload() into the slot pool: records must come through upload_slot()");
    cpu_->upload(src, *view(&dst), offset, bytes);
  }
  void upload_slot(const Buffer& staging, uint64_t staging_offset, Buffer& dst, uint64_t offset, uint64_t bytes) override {
    auto* to = dynamic_cast<HiddenBuffer*>(&dst);
    if (!to || !staging.host() || offset + bytes > dst.bytes()) fail("upload_slot: bad arguments");
    std::memcpy(to->memory.data() + offset, staging.host() + staging_offset, bytes);
    ++(&dst == slots_ ? uploads : other_uploads);
  }
  void download(const Tensor& src, void* dst) override { cpu_->download(v(src), dst); }
  void copy(const Tensor& src, const Tensor& dst) override { cpu_->copy(v(src), v(dst)); }
  void fill(const Tensor& dst, float value) override { cpu_->fill(v(dst), value); }
  Fence commit() override { return cpu_->commit(); }
  void wait(Fence fence) override { cpu_->wait(fence); }

  void matmul(const Weight& w, const Tensor& x, const Tensor& y) override { cpu_->matmul(v(w), v(x), v(y)); }
  void embed(const Weight& table, const Tensor& ids, const Tensor& out) override { cpu_->embed(v(table), v(ids), v(out)); }
  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    cpu_->rmsnorm(v(x), v(weight), eps, v(out));
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override { cpu_->add(v(a), v(b), v(out)); }
  void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& out) override {
    cpu_->mul_sigmoid(v(x), v(gate), v(out));
  }
  void gated(const GatedActivation& act, const Tensor& gate, const Tensor& up, const Tensor& out) override {
    cpu_->gated(act, v(gate), v(up), v(out));
  }
  void rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const Tensor& inv_freq,
            float attention_factor, int64_t start) override {
    cpu_->rope(v(x), heads, head_dim, offset, v(inv_freq), attention_factor, start);
  }
  void mla_attention(const MlaShape& shape, const Weight& kv_b, const Tensor& q, const Tensor& cache_c,
                     const Tensor& cache_pe, int64_t start, const Tensor& out) override {
    cpu_->mla_attention(shape, v(kv_b), v(q), v(cache_c), v(cache_pe), start, v(out));
  }
  void kda(const KdaArgs& args) override {
    KdaArgs a = args;
    for (Tensor* t : {&a.q, &a.k, &a.v, &a.beta, &a.decay, &a.conv_q, &a.conv_k, &a.conv_v, &a.dt_bias, &a.decay_rate,
                      &a.window, &a.state, &a.out})
      *t = v(*t);
    cpu_->kda(a);
  }
  void attn_res_mix(std::span<const Tensor> candidates, const Tensor& query, float eps, const Tensor& out) override {
    std::vector<Tensor> c(candidates.begin(), candidates.end());
    for (Tensor& t : c) t = v(t);
    cpu_->attn_res_mix(c, v(query), eps, v(out));
  }
  void route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, const Tensor& ids,
             const Tensor& weights) override {
    cpu_->route(spec, v(logits), v(bias), v(ids), v(weights));
  }
  void expert_slots(const Tensor& ids, const Tensor& experts, const Tensor& lists, const Tensor& counts) override {
    cpu_->expert_slots(v(ids), v(experts), v(lists), v(counts));
  }
  // The experts' weights, moved from the hidden pool onto its host view.
  void expert_ffn(std::span<const ResidentExpert> batch, const Tensor& x, const Tensor& lists, const Tensor& counts,
                  const GatedActivation& act, const Tensor& hidden, const Tensor& y) override {
    std::vector<ResidentExpert> viewed(batch.begin(), batch.end());
    for (ResidentExpert& e : viewed)
      for (Weight& w : e.proj) {
        if (w.data != slots_ || (w.scales && w.scales != slots_)) fail("expert_ffn: weights outside the slot pool");
        w = v(w);
      }
    cpu_->expert_ffn(viewed, v(x), v(lists), v(counts), act, v(hidden), v(y));
  }
  void expert_combine(const Tensor& ids, const Tensor& weights, const Tensor& y, const Tensor& out) override {
    cpu_->expert_combine(v(ids), v(weights), v(y), v(out));
  }
  void hold_until(Fence fence, std::shared_ptr<const void> pin) override { cpu_->hold_until(fence, std::move(pin)); }

 private:
  struct HiddenBuffer final : Buffer {
    HiddenBuffer(uint64_t bytes, Backend& cpu) : Buffer(bytes, nullptr), memory(std::max<uint64_t>(bytes, 1), 2 << 20) {
      view = cpu.wrap(memory.data(), bytes);
    }
    AlignedBuffer memory;
    std::unique_ptr<Buffer> view;  // what the CPU ops read and write
  };
  std::unique_ptr<HiddenBuffer> hidden(uint64_t bytes) { return std::make_unique<HiddenBuffer>(bytes, *cpu_); }
  static Buffer* view(Buffer* b) {
    auto* h = dynamic_cast<HiddenBuffer*>(b);
    return h ? h->view.get() : b;
  }
  Tensor v(Tensor t) const {
    if (t.buffer) t.buffer = view(t.buffer);
    return t;
  }
  Weight v(Weight w) const {
    if (w.data) w.data = view(w.data);
    if (w.scales) w.scales = view(w.scales);
    return w;
  }
  std::unique_ptr<Backend> cpu_;
  uint64_t device_bytes_;
  HiddenBuffer* slots_ = nullptr;
};

}  // namespace deltafin::test
