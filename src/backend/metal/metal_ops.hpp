// The Metal backend's op set, in plain C++: shape checks, the argument structs of
// kernels/metal/metal_shared.h and launch geometry. Two devices run
// it: the Objective-C++ host on Apple GPUs (metal_backend.mm) and the SIMT emulator of the Linux
// checks (tests/metal), each implementing the memory and command hooks below. Every buffer is
// host-visible (Apple unified memory: shared storage), so uploads and downloads are copies
// after the work in flight has completed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.hpp"

namespace deltafin::metal {

// One kernel launch: its argument struct (buffer index 0, copied by setBytes), the buffers at
// indices 1.., threadgroups (grid) of `threads` threads, and the threadgroup memory it needs.
struct Dispatch {
  struct Bind {
    const Buffer* buffer = nullptr;
    uint64_t offset = 0;
  };
  static constexpr int kMaxBuffers = 16;
  const char* kernel = nullptr;
  const void* args = nullptr;
  uint32_t args_bytes = 0;
  std::array<Bind, kMaxBuffers> buffers{};  // [0] unused (the arguments)
  uint32_t grid[3] = {1, 1, 1};
  uint32_t threads = 0;
  uint32_t tg_bytes = 0;
};

class MetalOps : public Backend {
 public:
  void upload(const void* src, Buffer& dst, uint64_t offset, uint64_t bytes) override;
  void upload_slot(const Buffer& staging, uint64_t staging_offset, Buffer& slots, uint64_t offset,
                   uint64_t bytes) override;
  void download(const Tensor& src, void* dst) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, float value) override;

  void matmul(const Weight& w, const Tensor& x, const Tensor& y) override;
  void embed(const Weight& table, const Tensor& ids, const Tensor& out) override;
  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& out) override;
  void gated(const GatedActivation& act, const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const Tensor& inv_freq,
            float attention_factor, int64_t start) override;
  void mla_attention(const MlaShape& shape, const Weight& kv_b, const Tensor& q, const Tensor& cache_c,
                     const Tensor& cache_pe, int64_t start, const Tensor& out) override;
  void kda(const KdaArgs& args) override;
  void attn_res_mix(std::span<const Tensor> candidates, const Tensor& query, float eps, const Tensor& out) override;
  void route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, const Tensor& ids,
             const Tensor& weights) override;
  void expert_slots(const Tensor& ids, const Tensor& experts, const Tensor& lists, const Tensor& counts) override;
  void expert_ffn(std::span<const ResidentExpert> batch, const Tensor& x, const Tensor& lists, const Tensor& counts,
                  const GatedActivation& act, const Tensor& hidden, const Tensor& y) override;
  void expert_combine(const Tensor& ids, const Tensor& weights, const Tensor& y, const Tensor& out) override;

 protected:
  // Encodes one launch after everything enqueued before it.
  virtual void dispatch(const Dispatch& d) = 0;
  // Starts the work enqueued so far without waiting for it (a no-op where dispatch runs at once).
  virtual void submit() = 0;
  // Blocks until everything enqueued has completed.
  virtual void finish() = 0;
  // Keeps `what` (an op's intermediate buffer) alive until the work enqueued so far has completed.
  virtual void hold(std::shared_ptr<const void> what) = 0;

 private:
  // A fresh buffer of `bytes` for an op's intermediates; the op hands it to hold() after its
  // last dispatch (not before: a finish() within the op would let it go).
  std::shared_ptr<Buffer> scratch(uint64_t bytes);
  // df_binary: add, mul_sigmoid or a gated activation.
  void binary(uint32_t op, const GatedActivation& act, const Tensor& a, const Tensor& b, const Tensor& out, const char* name);
};

}  // namespace deltafin::metal
