// A pool of `count` equal slots in one backend buffer, allocated once: the expert slot pool
// (Backend::allocate_slots), from which the expert store takes a slot for every expert it holds
// or is reading, and on a device whose slots the host cannot write, the staging slots
// (Backend::allocate_host) where reads land before they are uploaded. Where the pool is
// host-visible (CPU, Apple unified memory) reads land in its slots directly and ops read the
// weights where they landed. Slots are `slot_bytes` apart (the largest record rounded up to
// 4 KiB, so every slot starts O_DIRECT-aligned); the buffer is 2 MiB-aligned. Not thread-safe:
// the store calls it under its lock.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"

namespace deltafin {

class SlotPool {
 public:
  // `buffer` holds at least slot_bytes * count bytes.
  SlotPool(std::unique_ptr<Buffer> buffer, uint64_t slot_bytes, uint64_t count)
      : slot_bytes_(slot_bytes), count_(count), buffer_(std::move(buffer)) {
    free_.reserve(count);
    for (uint64_t s = count; s > 0; --s) free_.push_back(static_cast<int64_t>(s - 1));  // slot 0 first
  }

  // A free slot, or -1 when every slot is taken.
  int64_t take() {
    if (free_.empty()) return -1;
    const int64_t s = free_.back();
    free_.pop_back();
    return s;
  }
  void give(int64_t slot) { free_.push_back(slot); }
  bool available() const { return !free_.empty(); }

  uint64_t offset(int64_t slot) const { return static_cast<uint64_t>(slot) * slot_bytes_; }
  std::byte* host(int64_t slot) const { return buffer_->host() + offset(slot); }  // host-visible pools only
  Buffer& buffer() const { return *buffer_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t count() const { return count_; }

 private:
  uint64_t slot_bytes_, count_;
  std::unique_ptr<Buffer> buffer_;
  std::vector<int64_t> free_;
};

}  // namespace deltafin
