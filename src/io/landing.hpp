// Landing bytes in a backend buffer, the one rule for every read bound for backend memory (the
// spine's loader, the streamed spine, the expert store): the host writes them straight into the
// buffer where it can (Buffer::host(): CPU memory, Metal's shared storage, pinned memory), else
// into host staging memory (pinned: Backend::allocate_host) from which one copy moves them
// (Backend::upload_slot, which returns once the copy is complete).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.hpp"

namespace deltafin {

// Whether bytes bound for `b` must be staged in host memory first.
inline bool needs_staging(const Buffer& b) { return b.host() == nullptr; }

class Landing {
 public:
  // Bytes for dst[offset, offset + bytes); `staging` (host memory, at staging_offset) is where
  // they are written when the host cannot write dst, and must then be given (else it is unused).
  Landing(Buffer& dst, uint64_t offset, uint64_t bytes, const Buffer* staging = nullptr, uint64_t staging_offset = 0);

  // Where the host writes the bytes.
  std::byte* host() const;
  bool staged() const { return staged_; }
  // Moves them into dst (nothing where they were written there); returns once they are there.
  void finish(Backend& backend) const;

 private:
  Buffer& dst_;
  uint64_t offset_, bytes_;
  const Buffer* staging_;
  uint64_t staging_offset_;
  bool staged_;
};

}  // namespace deltafin
