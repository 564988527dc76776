// A model file opened read-only, read with positional reads (pread) that loop over short reads.
// Model files are never written. Errors name the file and the byte range.
// read_uncached() bypasses the page cache (O_DIRECT on Linux through a second descriptor,
// F_NOCACHE on macOS): streamed experts must not crowd the resident spine out of memory. Where
// the filesystem refuses direct I/O it reads normally and drops the pages afterwards.
#pragma once

#include <cstdint>
#include <string>

namespace deltafin {

class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(std::string path);  // throws deltafin::Error when it cannot be opened
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  // Reads exactly `size` bytes at `offset` into `dst`; throws on EOF or an I/O error.
  void read_exact(void* dst, uint64_t size, uint64_t offset) const;
  // The same, bypassing the page cache (any offset and size; aligned internally).
  void read_uncached(void* dst, uint64_t size, uint64_t offset) const;

  uint64_t size() const { return size_; }
  // Modification time at open, in nanoseconds since the epoch.
  int64_t mtime_ns() const { return mtime_ns_; }
  // Whether `other` is this very file (same device and inode: one path twice, a bind mount, a hard link).
  bool same_file(const ReadOnlyFile& other) const { return device_ == other.device_ && inode_ == other.inode_; }
  const std::string& path() const { return path_; }

 private:
  void direct_read(void* dst, uint64_t size, uint64_t offset, uint64_t needed = 0) const;

  std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;  // O_DIRECT descriptor (Linux), -1 where unavailable
  uint64_t size_ = 0;
  uint64_t device_ = 0, inode_ = 0;
  int64_t mtime_ns_ = 0;
};

}  // namespace deltafin
