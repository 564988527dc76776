// CudaBuffer (see cuda_buffer.hpp): allocation, registration and release.
#include "backend/cuda/cuda_buffer.hpp"

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "util/human_bytes.hpp"

namespace deltafin::cuda {
namespace {

constexpr uint64_t kHostAlignment = 2 << 20;

void* device_memory(uint64_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, std::max<uint64_t>(bytes, 1));
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail("CUDA: out of device memory allocating {} bytes ({}): cudaMalloc: {}", bytes, human_bytes(bytes),
         cudaGetErrorString(status));
  }
  return p;
}

// Pinned, mapped host memory holding `bytes` at a 2 MiB boundary: the block and that address.
std::pair<void*, std::byte*> pinned_memory(uint64_t bytes) {
  auto attempt = [](uint64_t size) {
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, std::max<uint64_t>(size, 1), cudaHostAllocMapped | cudaHostAllocPortable);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      fail("CUDA: out of pinned host memory allocating {} bytes ({}): cudaHostAlloc: {}", size, human_bytes(size),
           cudaGetErrorString(status));
    }
    return p;
  };
  void* block = attempt(bytes);
  if (reinterpret_cast<uintptr_t>(block) % kHostAlignment != 0) {  // not aligned: room to align inside
    check(cudaFreeHost(block), "cudaFreeHost");
    block = attempt(bytes + kHostAlignment);
  }
  const uintptr_t at = (reinterpret_cast<uintptr_t>(block) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  return {block, reinterpret_cast<std::byte*>(at)};
}

std::byte* mapped(std::byte* host) {
  void* device = nullptr;
  check(cudaHostGetDevicePointer(&device, host, 0), "cudaHostGetDevicePointer");
  return static_cast<std::byte*>(device);
}

bool page_locked(uintptr_t address) {
  cudaPointerAttributes a{};
  const bool locked = cudaPointerGetAttributes(&a, reinterpret_cast<void*>(address)) == cudaSuccess && a.type == cudaMemoryTypeHost;
  (void)cudaGetLastError();
  return locked;
}

// The host ranges wrap() registered with CUDA, whole pages, shared by the wraps that touch them:
// CUDA registers a page once, and two wrapped heap blocks may share one. A wrap registers the
// gaps between the ranges it meets and holds every range it touches; the last holder unregisters.
class HostRegistry {
 public:
  static HostRegistry& instance() {
    static HostRegistry registry;
    return registry;
  }

  // Holds pages [lo, hi); returns how many registrations they span.
  int hold(uintptr_t lo, uintptr_t hi) {
    std::lock_guard lock(mutex_);
    std::vector<uintptr_t> added;
    try {
      for (uintptr_t at = lo; at < hi;) {  // register the gaps between the ranges met
        const auto next = ranges_.lower_bound(at);
        if (next != ranges_.end() && next->first == at) {  // in a range already
          at = next->second.end;
          continue;
        }
        if (next != ranges_.begin() && std::prev(next)->second.end > at) {
          at = std::prev(next)->second.end;
          continue;
        }
        const uintptr_t end = next == ranges_.end() ? hi : std::min(hi, next->first);
        const bool owned = register_range(at, end);
        ranges_[at] = {end, 0, owned};
        added.push_back(at);
        at = end;
      }
    } catch (...) {
      for (uintptr_t at : added) unregister(ranges_.find(at));
      throw;
    }
    int spanned = 0;
    for (auto it = first_touching(lo); it != ranges_.end() && it->first < hi; ++it) ++it->second.holders, ++spanned;
    return spanned;
  }

  void release(uintptr_t lo, uintptr_t hi) {
    std::lock_guard lock(mutex_);
    for (auto it = first_touching(lo); it != ranges_.end() && it->first < hi;)
      it = --it->second.holders > 0 ? std::next(it) : unregister(it);
  }

 private:
  struct Range {
    uintptr_t end;
    int holders;
    bool owned;  // registered here, so unregistered here
  };

  using Iterator = std::map<uintptr_t, Range>::iterator;

  // Registers [begin, end); false where CUDA has it pinned already (its owner's memory).
  static bool register_range(uintptr_t begin, uintptr_t end) {
    const cudaError_t status =
        cudaHostRegister(reinterpret_cast<void*>(begin), end - begin, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (status == cudaErrorHostMemoryAlreadyRegistered && page_locked(begin) && page_locked(end - 1)) {
      (void)cudaGetLastError();
      return false;
    }
    check(status, fmt::format("cudaHostRegister of {} bytes", end - begin).c_str());
    return true;
  }

  Iterator unregister(Iterator it) {
    if (it->second.owned) (void)cudaHostUnregister(reinterpret_cast<void*>(it->first));
    (void)cudaGetLastError();
    return ranges_.erase(it);
  }

  Iterator first_touching(uintptr_t lo) {
    auto it = ranges_.upper_bound(lo);
    if (it != ranges_.begin() && std::prev(it)->second.end > lo) --it;
    return it;
  }

  std::mutex mutex_;
  std::map<uintptr_t, Range> ranges_;  // start -> range; disjoint
};

std::pair<uintptr_t, uintptr_t> pages(const std::byte* host, uint64_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(host);
  return {begin / page * page, (begin + bytes + page - 1) / page * page};
}

}  // namespace

std::unique_ptr<CudaBuffer> CudaBuffer::allocate(Kind kind, uint64_t bytes) {
  if (kind == Kind::kDevice) {
    std::unique_ptr<CudaBuffer> b(new CudaBuffer(bytes, nullptr, kind));
    b->vram_ = device_memory(bytes);
    b->device_ = static_cast<std::byte*>(b->vram_);
    return b;
  }
  const auto [block, host] = pinned_memory(bytes);
  std::unique_ptr<CudaBuffer> b(new CudaBuffer(bytes, host, kind));
  b->pinned_ = block;
  b->device_ = mapped(host);
  return b;
}

std::unique_ptr<CudaBuffer> CudaBuffer::wrap(std::byte* host, uint64_t bytes) {
  std::unique_ptr<CudaBuffer> b(new CudaBuffer(bytes, host, Kind::kWrapped));
  if (bytes == 0) return b;  // nothing to read: no address needed
  const auto [lo, hi] = pages(host, bytes);
  const int spanned = HostRegistry::instance().hold(lo, hi);
  b->registered_ = true;
  b->device_ = mapped(host);
  // Across registrations the device addresses are contiguous only where they are the host's.
  if (spanned > 1 && b->device_ != host)
    fail("cuda backend: wrap: {} bytes at {} span {} host registrations and this device maps them apart", bytes,
         static_cast<const void*>(host), spanned);
  return b;
}

CudaBuffer::~CudaBuffer() {  // errors here have nowhere to go: the memory is released regardless
  if (vram_) (void)cudaFree(vram_);
  if (pinned_) (void)cudaFreeHost(pinned_);
  if (registered_) {
    const auto [lo, hi] = pages(host(), bytes());
    HostRegistry::instance().release(lo, hi);
  }
  (void)cudaGetLastError();
}

const CudaBuffer& cuda_buffer(const Buffer& buffer, const char* what) {
  const auto* b = dynamic_cast<const CudaBuffer*>(&buffer);
  if (!b) fail("cuda backend: {} is a buffer of another backend ({} bytes)", what, buffer.bytes());
  return *b;
}

}  // namespace deltafin::cuda
