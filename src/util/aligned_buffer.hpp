// A heap buffer aligned for SIMD loads and (later) O_DIRECT reads.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace deltafin {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 4096;

  AlignedBuffer() = default;
  // `alignment`: a power of two, at least kAlignment.
  explicit AlignedBuffer(size_t size, size_t alignment = kAlignment) : size_(size) {
    if (size == 0) return;
    const size_t rounded = (size + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p) throw std::bad_alloc();
    data_.reset(static_cast<std::byte*>(p));
  }

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace deltafin
