// ReadOnlyFile: open(O_RDONLY) + pread loop.
#include "util/read_only_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "util/aligned_buffer.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

namespace deltafin {
namespace {

constexpr uint64_t round_up_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

ReadOnlyFile::ReadOnlyFile(std::string path) : path_(std::move(path)) {
  require_regular_file(path_, "the file");
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open: {}", path_, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail("{}: cannot stat: {}", path_, std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  device_ = static_cast<uint64_t>(st.st_dev), inode_ = static_cast<uint64_t>(st.st_ino);
#ifdef __APPLE__
  mtime_ns_ = static_cast<int64_t>(st.st_mtimespec.tv_sec) * 1000000000 + st.st_mtimespec.tv_nsec;
#else
  mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
#endif
#ifdef __APPLE__
  ::fcntl(fd_, F_NOCACHE, 1);  // macOS: every read of this descriptor bypasses the cache
#elif defined(O_DIRECT)
  direct_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);  // -1: filesystem refuses
#endif
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

void ReadOnlyFile::read_exact(void* dst, uint64_t size, uint64_t offset) const {
  auto* out = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: read of {} bytes at offset {} failed: {}", path_, size, offset, std::strerror(errno));
    }
    if (n == 0) fail("{}: file ends at byte {}, expected {} bytes at offset {} (truncated?)", path_, offset + done, size, offset);
    done += static_cast<uint64_t>(n);
  }
}

void ReadOnlyFile::read_uncached(void* dst, uint64_t size, uint64_t offset) const {
  constexpr uint64_t kAlign = AlignedBuffer::kAlignment;
  if (direct_fd_ < 0) {
    read_exact(dst, size, offset);
#ifdef POSIX_FADV_DONTNEED
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(size), POSIX_FADV_DONTNEED);
#endif
    return;
  }
  // O_DIRECT needs aligned offsets, lengths and buffers: placed records are, and are read in
  // place; anything else goes through a bounce buffer holding the aligned span.
  if ((offset | size | reinterpret_cast<uintptr_t>(dst)) % kAlign == 0) {
    direct_read(dst, size, offset);
    return;
  }
  const uint64_t begin = offset / kAlign * kAlign, end = (offset + size + kAlign - 1) / kAlign * kAlign;
  thread_local AlignedBuffer bounce;
  if (bounce.size() < end - begin) bounce = AlignedBuffer(end - begin);
  direct_read(bounce.data(), std::min(end, round_up_to(size_, kAlign)) - begin, begin, offset + size - begin);
  std::memcpy(dst, bounce.data() + (offset - begin), size);
}

void ReadOnlyFile::direct_read(void* dst, uint64_t size, uint64_t offset, uint64_t needed) const {
  // Reads `size` aligned bytes; a short final read is fine once `needed` bytes have arrived (the
  // file's unaligned tail).
  if (needed == 0) needed = size;
  auto* out = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < needed) {
    const ssize_t n = ::pread(direct_fd_, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: direct read of {} bytes at offset {} failed: {}", path_, size, offset, std::strerror(errno));
    }
    if (n == 0) fail("{}: file ends at byte {}, expected {} bytes at offset {} (truncated?)", path_, offset + done, needed, offset);
    done += static_cast<uint64_t>(n);
  }
}

}  // namespace deltafin
