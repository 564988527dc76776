// A model file opened read-only, read with positional reads (pread) that loop over short reads.
// Model files are never written. Errors name the file and the byte range.
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

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace deltafin
