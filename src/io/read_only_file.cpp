// ReadOnlyFile: open(O_RDONLY) + pread loop.
#include "io/read_only_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.hpp"

namespace deltafin {

ReadOnlyFile::ReadOnlyFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open: {}", path_, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail("{}: cannot stat: {}", path_, std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
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

}  // namespace deltafin
