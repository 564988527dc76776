// OutputFile (see atomic_file.hpp).
#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "util/error.hpp"

namespace deltafin {
namespace {

// The directory of `path` ("." for a bare name).
std::string directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

void write_all(int fd, const std::string& bytes, const std::string& name) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: write failed: {}", name, std::strerror(n < 0 ? errno : EIO));
    done += static_cast<size_t>(n);
  }
}

}  // namespace

OutputFile::OutputFile(std::string path) : path_(std::move(path)), target_(path_) {
  if (path_.empty()) fail("an output path is empty");
  if (path_ == "-") {
    fd_ = STDOUT_FILENO, in_place_ = true;
    return;
  }
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) fail("{}: is a directory, not a file to write", path_);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);  // a device, FIFO or socket: in place
    if (fd_ < 0) fail("{}: cannot open for writing: {}", path_, std::strerror(errno));
    in_place_ = true;
    return;
  }
  // A symlink, perhaps dangling or chained: follow it link by link to the file it names.
  std::error_code ec;
  std::filesystem::path at = path_;
  for (int hops = 0; std::filesystem::is_symlink(std::filesystem::symlink_status(at, ec)); ++hops) {
    if (hops == 40) fail("{}: too many levels of symbolic links", path_);
    const std::filesystem::path next = std::filesystem::read_symlink(at, ec);
    if (ec) fail("{}: cannot read the symlink: {}", path_, ec.message());
    at = next.is_absolute() ? next : at.parent_path() / next;
  }
  target_ = at.string();
  const std::string dir = directory_of(target_);
  const std::string temp_name = std::string(".").append(std::filesystem::path(target_).filename().string()).append(".XXXXXX");
  std::string name = (std::filesystem::path(dir) / temp_name).string();
  std::vector<char> buf(name.begin(), name.end());
  buf.push_back('\0');
  fd_ = ::mkstemp(buf.data());
  if (fd_ < 0) fail("{}: cannot write in {}: {}", path_, dir, std::strerror(errno));
  tmp_ = buf.data();
  ::fchmod(fd_, 0644);
}

OutputFile::~OutputFile() {
  if (in_place_) {
    if (fd_ != STDOUT_FILENO && fd_ >= 0) ::close(fd_);
    return;
  }
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void OutputFile::write(const std::string& bytes) {
  if (fd_ < 0) fail("{}: written twice", path_);
  if (in_place_) {
    if (fd_ == STDOUT_FILENO) std::fflush(stdout);  // after what stdio already holds
    write_all(fd_, bytes, path_ == "-" ? "stdout" : path_);
    if (fd_ != STDOUT_FILENO) ::close(fd_);
    fd_ = -1;
    return;
  }
  write_all(fd_, bytes, tmp_);
  if (::fsync(fd_) != 0) fail("{}: cannot sync: {}", tmp_, std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0) fail("{}: cannot rename into place: {}", target_, std::strerror(errno));
  tmp_.clear();
  const int dir = ::open(directory_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // the rename itself survives a crash only once the directory is synced
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) { OutputFile(path).write(text); }

}  // namespace deltafin
