// OutputFile (see atomic_file.hpp).
#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
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

constexpr const char* kTempMarker = ".deltafin-tmp-";  // ".<name>.deltafin-tmp-XXXXXX"

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
  remove_stale_temporaries(dir);
  const std::string temp_name =
      std::string(".").append(std::filesystem::path(target_).filename().string()).append(kTempMarker).append("XXXXXX");
  const std::string name = (std::filesystem::path(dir) / temp_name).string();
  for (;;) {
    std::vector<char> buf(name.begin(), name.end());
    buf.push_back('\0');
    fd_ = ::mkstemp(buf.data());
    if (fd_ < 0) fail("{}: cannot write in {}: {}", path_, dir, std::strerror(errno));
    // Held while this process lives. Another process's cleaning may have locked and removed it
    // between mkstemp and here (it found it unlocked): then make another.
    struct stat st {};
    if (::flock(fd_, LOCK_EX) != 0 || ::fstat(fd_, &st) != 0 || st.st_nlink > 0) {
      tmp_ = buf.data();
      break;
    }
    ::close(fd_);
  }
  ::fchmod(fd_, 0644);
}

bool is_output_temporary(const std::string& name) {
  const size_t marker = name.rfind(kTempMarker);
  return name.size() > 1 && name[0] == '.' && marker != std::string::npos && marker > 1 &&
         name.size() == marker + std::strlen(kTempMarker) + 6;
}

int remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  int removed = 0;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_output_temporary(name)) continue;
    const std::string path = it->path().string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat held {}, now {};
    // Unlocked: its writer is gone. Still the same file under that name: remove it (its lock is
    // ours until closed, so no writer can take it up meanwhile).
    if (::fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::lstat(path.c_str(), &now) == 0 && now.st_dev == held.st_dev && now.st_ino == held.st_ino &&
        ::unlink(path.c_str()) == 0)
      ++removed;
    ::close(fd);
  }
  return removed;
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
