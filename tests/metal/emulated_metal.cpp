// The emulated Metal backend (emulated_metal.hpp).
#include "emulated_metal.hpp"

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "backend/metal/metal_ops.hpp"
#include "emulated_kernels.hpp"
#include "util/error.hpp"

namespace deltafin::test {
namespace {

std::map<std::string, int64_t> g_dispatches;

class HostBuffer final : public Buffer {
 public:
  HostBuffer(std::byte* p, uint64_t bytes, bool owned) : Buffer(bytes, p), owned_(owned) {}
  ~HostBuffer() override {
    if (owned_) std::free(host());
  }
  static std::unique_ptr<Buffer> allocate(uint64_t bytes, uint64_t alignment) {
    const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p) throw std::bad_alloc();
    return std::make_unique<HostBuffer>(static_cast<std::byte*>(p), bytes, true);
  }

 private:
  bool owned_;
};

class EmulatedMetal final : public metal::MetalOps {
 public:
  const char* name() const override { return "metal-emulated"; }
  int threads() const override { return 1; }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override { return HostBuffer::allocate(bytes, 16 << 10); }
  std::unique_ptr<Buffer> allocate_slots(uint64_t bytes) override { return HostBuffer::allocate(bytes, 2 << 20); }
  std::unique_ptr<Buffer> allocate_host(uint64_t bytes) override { return HostBuffer::allocate(bytes, 2 << 20); }
  std::unique_ptr<Buffer> wrap(std::byte* host, uint64_t bytes) override {
    if (reinterpret_cast<uintptr_t>(host) % (16 << 10) != 0)
      fail("metal backend: wrap of memory at {} (no-copy buffers need 16 KiB alignment)", static_cast<void*>(host));
    return std::make_unique<HostBuffer>(host, bytes, false);
  }
  Fence commit() override {
    finish();
    return ++fence_;
  }
  void wait(Fence) override {}
  void hold_until(Fence, std::shared_ptr<const void>) override {}  // commit() has finished the work

 protected:
  void dispatch(const metal::Dispatch& d) override {
    const simt::Kernel& kernel = simt::emulated_kernel(d.kernel);
    simt::Buffers buffers{};
    buffers[0] = const_cast<std::byte*>(static_cast<const std::byte*>(d.args));
    for (int i = 1; i < metal::Dispatch::kMaxBuffers; ++i)
      if (d.buffers[i].buffer) buffers[i] = d.buffers[i].buffer->host() + d.buffers[i].offset;
    ++g_dispatches[d.kernel];
    simt::run(d.kernel, d.grid, d.threads, d.tg_bytes,
              [&](simt::Group g, uint32_t lid, std::byte* tg) { kernel(buffers, g, lid, tg); });
  }
  void submit() override {}
  // The work has completed when dispatch() returns; what hold() keeps is let go at the next
  // finish() (a download, an upload or a commit), as a device would let it go once its command
  // buffer has completed.
  void finish() override { held_.clear(); }
  void hold(std::shared_ptr<const void> what) override { held_.push_back(std::move(what)); }

 private:
  Fence fence_ = 0;
  std::vector<std::shared_ptr<const void>> held_;
};

}  // namespace

std::unique_ptr<Backend> make_emulated_metal_backend() { return std::make_unique<EmulatedMetal>(); }

const std::map<std::string, int64_t>& emulated_dispatch_counts() { return g_dispatches; }

}  // namespace deltafin::test
