// Landing (see landing.hpp).
#include "io/landing.hpp"

#include "util/error.hpp"

namespace deltafin {

Landing::Landing(Buffer& dst, uint64_t offset, uint64_t bytes, const Buffer* staging, uint64_t staging_offset)
    : dst_(dst), offset_(offset), bytes_(bytes), staging_(staging), staging_offset_(staging_offset), staged_(needs_staging(dst)) {
  if (offset + bytes > dst.bytes()) fail("landing {} bytes at {} of a buffer of {} bytes", bytes, offset, dst.bytes());
  if (staged_ && (!staging || !staging->host() || staging_offset + bytes > staging->bytes()))
    fail("landing {} bytes in device memory: no host staging memory for them", bytes);
}

std::byte* Landing::host() const { return staged_ ? staging_->host() + staging_offset_ : dst_.host() + offset_; }

void Landing::finish(Backend& backend) const {
  if (staged_ && bytes_ > 0) backend.upload_slot(*staging_, staging_offset_, dst_, offset_, bytes_);
}

}  // namespace deltafin
