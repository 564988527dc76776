// The Metal backend on Apple GPUs: the device, one command queue, a compute pipeline per kernel
// of kernels/metal (their source embedded in the binary and compiled at startup with
// newLibraryWithSource, MSL 2.4, no fast math), buffers, and command buffers; the ops themselves
// are MetalOps (metal_ops.hpp). Built on macOS only; on Linux CI checks this file's syntax against
// a stub of the Metal API (tests/metal/check_host.sh). It has not yet run on Apple hardware.
//
// Memory is unified: allocate() is a shared-storage buffer; the slot pool and wrap() are host
// memory (16 KiB-aligned; slots 2 MiB-aligned, so the expert reads land in them) wrapped once as
// no-copy buffers. Commands: dispatches are encoded in order into one compute encoder of the open
// command buffer (a serial encoder: each dispatch sees the previous one's writes); submit()
// commits it; a fence is the number of command buffers committed; what hold() keeps rides on the
// command buffer that was open (or last committed) and is let go once that one has completed, so
// a slot is never reused under a running kernel.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/metal/metal_device.hpp"
#include "backend/metal/metal_layout.hpp"
#include "backend/metal/metal_ops.hpp"
#include "util/error.hpp"

namespace deltafin {
extern const char kMetalSource[];  // kernels/metal, concatenated by cmake/metal_embed.cmake

namespace metal {
namespace {

constexpr uint64_t kPage = 16 << 10;

std::string text(NSString* s) { return s ? std::string([s UTF8String]) : std::string(); }

class MetalBuffer final : public Buffer {
 public:
  MetalBuffer(id<MTLBuffer> buffer, uint64_t bytes, std::byte* host, void* owned)
      : Buffer(bytes, host), buffer_(buffer), owned_(owned) {}
  ~MetalBuffer() override {
    buffer_ = nil;  // released before the memory it wraps
    std::free(owned_);
  }
  id<MTLBuffer> buffer() const { return buffer_; }

 private:
  id<MTLBuffer> buffer_;
  void* owned_;
};

const MetalBuffer& metal_buffer(const Buffer* b, const char* kernel) {
  const auto* m = dynamic_cast<const MetalBuffer*>(b);
  if (!m) fail("metal backend: {}: a buffer of another backend", kernel);
  return *m;
}

class MetalBackend final : public MetalOps {
 public:
  MetalBackend() {
    device_ = MTLCreateSystemDefaultDevice();
    if (!device_) fail("--backend metal: no Metal device on this machine");
    queue_ = [device_ newCommandQueue];
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    options.fastMathEnabled = NO;
    options.languageVersion = MTLLanguageVersion2_4;
    NSError* error = nil;
    library_ = [device_ newLibraryWithSource:[NSString stringWithUTF8String:kMetalSource] options:options error:&error];
    if (!library_) fail("metal backend: the kernels do not compile: {}", text(error.localizedDescription));
    if (error) log_.push_back({"library", text(error.localizedDescription)});  // warnings
  }

  const char* name() const override { return "metal"; }
  std::string describe() const override {
    return fmt::format("metal ({}, {:.0f} GiB working set{})", text(device_.name),
                       double(device_.recommendedMaxWorkingSetSize) / double(1ull << 30),
                       device_.hasUnifiedMemory ? ", unified memory" : "");
  }
  int threads() const override { return 1; }

  // --- memory ---------------------------------------------------------------------------
  // Unified memory: one pool, the host's, which the host writes directly.
  std::vector<MemoryPool> memory_pools() const override { return {host_memory_pool("unified")}; }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    const uint64_t length = std::max<uint64_t>(bytes, 16);
    if (length > device_.maxBufferLength)
      fail("metal backend: a buffer of {} bytes exceeds this device's maxBufferLength ({})", length,
           uint64_t(device_.maxBufferLength));
    id<MTLBuffer> b = [device_ newBufferWithLength:length options:MTLResourceStorageModeShared];
    if (!b) fail("metal backend: no memory for a buffer of {} bytes", length);
    return std::make_unique<MetalBuffer>(b, bytes, static_cast<std::byte*>([b contents]), nullptr);
  }
  std::unique_ptr<Buffer> allocate_slots(uint64_t bytes) override { return host_memory(bytes, 2 << 20); }
  std::unique_ptr<Buffer> allocate_host(uint64_t bytes) override { return host_memory(bytes, 2 << 20); }
  std::unique_ptr<Buffer> wrap(std::byte* host, uint64_t bytes) override { return no_copy(host, bytes, nullptr); }

  Fence commit() override {
    submit();
    return committed_;
  }
  void wait(Fence fence) override {
    while (!in_flight_.empty() && in_flight_.front().fence <= fence) {
      [in_flight_.front().commands waitUntilCompleted];
      retire_front();
    }
  }

  // --- what metal-selftest reports ------------------------------------------------------------
  DeviceReport report() {
    DeviceReport r;
    r.name = text(device_.name);
    r.max_buffer_length = device_.maxBufferLength;
    r.recommended_working_set = device_.recommendedMaxWorkingSetSize;
    r.unified_memory = device_.hasUnifiedMemory;
    r.max_threadgroup_memory = device_.maxThreadgroupMemoryLength;
    r.language_version = "2.4";
    for (const char* kernel : {"df_fill", "df_copy", "df_binary", "df_embed", "df_rmsnorm", "df_rope", "df_matmul",
                               "df_expert_slots", "df_expert_combine", "df_route", "df_mla_attention", "df_kda_conv",
                               "df_kda_delta", "df_attn_res_mix"})
      pipeline(kernel);
    r.pipelines = log_;
    return r;
  }

 protected:
  void dispatch(const Dispatch& d) override {
    id<MTLComputePipelineState> p = pipeline(d.kernel);
    if (d.tg_bytes > device_.maxThreadgroupMemoryLength)
      fail("metal backend: {} needs {} bytes of threadgroup memory; this device has {}", d.kernel, d.tg_bytes,
           uint64_t(device_.maxThreadgroupMemoryLength));
    if (d.threads > p.maxTotalThreadsPerThreadgroup)
      fail("metal backend: {} with {} threads per threadgroup; its pipeline allows {}", d.kernel, d.threads,
           uint64_t(p.maxTotalThreadsPerThreadgroup));
    if (!encoder_) {
      commands_ = [queue_ commandBuffer];
      encoder_ = [commands_ computeCommandEncoder];
    }
    [encoder_ setComputePipelineState:p];
    [encoder_ setBytes:d.args length:d.args_bytes atIndex:0];
    for (NSUInteger i = 1; i < Dispatch::kMaxBuffers; ++i) {
      const Dispatch::Bind& b = d.buffers[i];
      if (b.buffer) [encoder_ setBuffer:metal_buffer(b.buffer, d.kernel).buffer() offset:b.offset atIndex:i];
    }
    [encoder_ setThreadgroupMemoryLength:d.tg_bytes atIndex:0];
    [encoder_ dispatchThreadgroups:MTLSizeMake(d.grid[0], d.grid[1], d.grid[2])
             threadsPerThreadgroup:MTLSizeMake(d.threads, 1, 1)];
  }

  void submit() override {
    if (!encoder_) {  // nothing open: what was held rides on the last command buffer committed
      if (in_flight_.empty()) open_held_.clear();
      else move_held(in_flight_.back());
      return;
    }
    [encoder_ endEncoding];
    [commands_ commit];
    in_flight_.push_back({commands_, ++committed_, {}});
    move_held(in_flight_.back());
    encoder_ = nil;
    commands_ = nil;
  }

  void finish() override {
    submit();
    wait(committed_);
  }

  void hold(std::shared_ptr<const void> what) override { open_held_.push_back(std::move(what)); }

  // The pin rides on the command buffer of that fence; one that has completed lets go at once.
  void hold_until(Fence fence, std::shared_ptr<const void> pin) override {
    while (!in_flight_.empty() && in_flight_.front().commands.status >= MTLCommandBufferStatusCompleted) retire_front();
    for (Batch& b : in_flight_)
      if (b.fence == fence) return b.held.push_back(std::move(pin));
    if (fence > committed_) open_held_.push_back(std::move(pin));  // not committed yet: rides on the open one
  }

 private:
  struct Batch {
    id<MTLCommandBuffer> commands;
    Fence fence;
    std::vector<std::shared_ptr<const void>> held;
  };

  void move_held(Batch& b) {
    for (auto& h : open_held_) b.held.push_back(std::move(h));
    open_held_.clear();
  }

  void retire_front() {
    Batch& b = in_flight_.front();
    if (b.commands.status == MTLCommandBufferStatusError)
      fail("metal backend: a command buffer failed: {}", text(b.commands.error.localizedDescription));
    in_flight_.pop_front();
  }

  id<MTLComputePipelineState> pipeline(const char* kernel) {
    const auto it = pipelines_.find(kernel);
    if (it != pipelines_.end()) return it->second;
    id<MTLFunction> f = [library_ newFunctionWithName:[NSString stringWithUTF8String:kernel]];
    if (!f) fail("metal backend: the library has no kernel {}", kernel);
    NSError* error = nil;
    id<MTLComputePipelineState> p = [device_ newComputePipelineStateWithFunction:f error:&error];
    if (!p) fail("metal backend: pipeline {}: {}", kernel, text(error.localizedDescription));
    if (p.threadExecutionWidth != dfm::kSimdWidth)
      fail("metal backend: pipeline {} runs simdgroups of {} threads; the kernels assume {}", kernel,
           uint64_t(p.threadExecutionWidth), uint32_t(dfm::kSimdWidth));
    log_.push_back({kernel, error ? text(error.localizedDescription) : std::string()});
    pipelines_.emplace(kernel, p);
    return p;
  }

  // Host memory of `alignment`, wrapped without a copy (freed with the buffer).
  std::unique_ptr<Buffer> host_memory(uint64_t bytes, uint64_t alignment) {
    const uint64_t length = (std::max<uint64_t>(bytes, 1) + kPage - 1) / kPage * kPage;
    void* p = nullptr;
    if (posix_memalign(&p, alignment, length) != 0) fail("metal backend: no memory for {} bytes of host buffers", length);
    return no_copy(static_cast<std::byte*>(p), bytes, p);
  }

  std::unique_ptr<Buffer> no_copy(std::byte* host, uint64_t bytes, void* owned) {
    if (reinterpret_cast<uintptr_t>(host) % kPage != 0) {
      std::free(owned);
      fail("metal backend: wrap of memory at {} (no-copy buffers need 16 KiB alignment)", static_cast<void*>(host));
    }
    const uint64_t length = (std::max<uint64_t>(bytes, 1) + kPage - 1) / kPage * kPage;  // whole pages of the mapping
    id<MTLBuffer> b = [device_ newBufferWithBytesNoCopy:host length:length options:MTLResourceStorageModeShared deallocator:nil];
    if (!b) {
      std::free(owned);
      fail("metal backend: newBufferWithBytesNoCopy refused {} bytes at {}", length, static_cast<void*>(host));
    }
    return std::make_unique<MetalBuffer>(b, bytes, host, owned);
  }

  id<MTLDevice> device_ = nil;
  id<MTLCommandQueue> queue_ = nil;
  id<MTLLibrary> library_ = nil;
  std::map<std::string, id<MTLComputePipelineState>> pipelines_;
  std::vector<std::pair<std::string, std::string>> log_;
  id<MTLCommandBuffer> commands_ = nil;
  id<MTLComputeCommandEncoder> encoder_ = nil;
  std::deque<Batch> in_flight_;
  std::vector<std::shared_ptr<const void>> open_held_;
  Fence committed_ = 0;
};

// Experts of K3's shape in MXFP4 (7168 in, 2048 wide), random codes at scale 1, in one slot pool.
class BenchExperts {
 public:
  static constexpr int64_t kIn = 7168, kWidth = 2048;
  BenchExperts(Backend& b, int count) {
    std::mt19937 rng(1);
    const uint64_t data[3] = {uint64_t(kWidth * kIn / 2), uint64_t(kWidth * kIn / 2), uint64_t(kIn * kWidth / 2)};
    const uint64_t scales[3] = {uint64_t(kWidth * kIn / 32), uint64_t(kWidth * kIn / 32), uint64_t(kIn * kWidth / 32)};
    for (int p = 0; p < 3; ++p) bytes_per_expert += data[p] + scales[p];
    pool_ = b.allocate_slots(bytes_per_expert * count);
    for (int e = 0; e < count; ++e) {
      uint64_t at = bytes_per_expert * e;
      ResidentExpert w{{}, e};
      for (int p = 0; p < 3; ++p) {
        std::byte* d = pool_->host() + at;
        for (uint64_t i = 0; i < data[p]; ++i) d[i] = std::byte(rng());
        std::memset(d + data[p], 127, scales[p]);  // E8M0 2^0
        const bool down = p == 2;
        w.proj[p] = {WeightFormat::MXFP4, down ? kIn : kWidth, down ? kWidth : kIn, pool_.get(), at, pool_.get(), at + data[p]};
        at += data[p] + scales[p];
      }
      experts.push_back(w);
    }
  }
  uint64_t bytes_per_expert = 0;
  std::vector<ResidentExpert> experts;  // expert e is row e of the slot lists

 private:
  std::unique_ptr<Buffer> pool_;
};

template <class F>
double seconds(Backend& b, int runs, F&& f) {
  f();
  b.wait(b.commit());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) f();
  b.wait(b.commit());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / runs;
}

}  // namespace

DeviceReport device_report() {
  MetalBackend b;
  DeviceReport r = b.report();
  {  // a no-copy wrap of a 16 KiB-aligned read buffer, written by a kernel and read on the host
    void* p = nullptr;
    if (posix_memalign(&p, kPage, kPage) == 0) {
      std::memset(p, 0, kPage);
      {
        std::unique_ptr<Buffer> w = b.wrap(static_cast<std::byte*>(p), kPage);
        b.fill(Tensor::of(*w, 1, kPage / 4), 3.0f);
        b.wait(b.commit());
      }
      float seen = 0;
      std::memcpy(&seen, static_cast<std::byte*>(p) + kPage - 4, 4);
      r.no_copy_wrap = seen == 3.0f;
      r.no_copy_detail = r.no_copy_wrap ? "the kernel's writes reached the wrapped memory" : "the kernel's writes did not arrive";
      std::free(p);
    }
  }
  {  // the expert op on K3 shapes (8 experts, one token) against a copy in the same run
    constexpr int kExperts = 8;
    BenchExperts source(b, kExperts);
    std::unique_ptr<Buffer> x = b.allocate(BenchExperts::kIn * 4), out = b.allocate(BenchExperts::kIn * 4);
    std::unique_ptr<Buffer> ids = b.allocate(kExperts * 4), weights = b.allocate(kExperts * 4);
    std::vector<int32_t> chosen(kExperts);
    std::vector<float> ones(BenchExperts::kIn, 0.01f), w(kExperts, 0.125f);
    for (int e = 0; e < kExperts; ++e) chosen[e] = e;
    b.upload(ones.data(), *x, 0, ones.size() * 4);
    b.upload(chosen.data(), *ids, 0, chosen.size() * 4);
    b.upload(w.data(), *weights, 0, w.size() * 4);
    const GatedActivation act{GatedActivation::kSiLU};
    std::unique_ptr<Buffer> lists = b.allocate(kExperts * 4), counts = b.allocate(kExperts * 4);
    std::unique_ptr<Buffer> hidden = b.allocate(kExperts * BenchExperts::kWidth * 4), y = b.allocate(kExperts * BenchExperts::kIn * 4);
    const Tensor id_t = Tensor::of(*ids, 1, kExperts, Elem::I32), list_t = Tensor::of(*lists, kExperts, 1, Elem::I32);
    const Tensor count_t = Tensor::of(*counts, kExperts, 1, Elem::I32), y_t = Tensor::of(*y, kExperts, BenchExperts::kIn);
    b.expert_slots(id_t, Tensor::of(*ids, kExperts, 1, Elem::I32), list_t, count_t);  // the union is the ids
    const double t = seconds(b, 20, [&] {  // as the expert driver runs them: one expert per expert_ffn
      for (const ResidentExpert& e : source.experts)
        b.expert_ffn(std::span(&e, 1), Tensor::of(*x, 1, BenchExperts::kIn), list_t, count_t, act,
                     Tensor::of(*hidden, kExperts, BenchExperts::kWidth), y_t);
      b.expert_combine(id_t, Tensor::of(*weights, 1, kExperts), y_t, Tensor::of(*out, 1, BenchExperts::kIn));
    });
    r.expert_gbps = double(source.bytes_per_expert) * kExperts / t / 1e9;
    const int64_t rows = 8192, cols = 8192;  // 256 MiB each way
    std::unique_ptr<Buffer> from = b.allocate(rows * cols * 4), to = b.allocate(rows * cols * 4);
    const double c = seconds(b, 10, [&] { b.copy(Tensor::of(*from, rows, cols), Tensor::of(*to, rows, cols)); });
    r.copy_gbps = 2.0 * rows * cols * 4 / c / 1e9;
  }
  return r;
}

}  // namespace metal

std::unique_ptr<Backend> make_metal_backend() { return std::make_unique<metal::MetalBackend>(); }

bool metal_device_present() {
  @autoreleasepool {
    return MTLCreateSystemDefaultDevice() != nil;
  }
}

}  // namespace deltafin
