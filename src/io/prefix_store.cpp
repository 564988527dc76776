// The prefix cache's directory (see prefix_store.hpp).
#include "io/prefix_store.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <tuple>

#include "io/prefix_entry.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

constexpr const char* kEntrySuffix = ".dpc";
constexpr size_t kKeyHexChars = 32;

// An entry file's name split: "<count>-<32 hex>.dpc".
struct EntryName {
  size_t count = 0;
  std::string hex;
};

std::optional<EntryName> split_entry_name(const std::string& name) {
  const size_t dash = name.find('-');
  const size_t suffix = std::strlen(kEntrySuffix);
  if (dash == 0 || dash == std::string::npos || dash > 12 || name.size() != dash + 1 + kKeyHexChars + suffix ||
      name.compare(name.size() - suffix, suffix, kEntrySuffix) != 0)
    return std::nullopt;
  EntryName out;
  for (size_t i = 0; i < dash; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    out.count = out.count * 10 + static_cast<size_t>(name[i] - '0');
  }
  out.hex = name.substr(dash + 1, kKeyHexChars);
  for (const char c : out.hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  return out;
}

// The key's hash state after the model fingerprint and format version; token ids follow.
struct KeyHash {
  XXH3_state_t* state = XXH3_createState();
  KeyHash(const std::string& fingerprint, uint32_t format_version) {
    XXH3_128bits_reset(state);
    const uint32_t length = static_cast<uint32_t>(fingerprint.size());
    XXH3_128bits_update(state, &length, sizeof(length));
    XXH3_128bits_update(state, fingerprint.data(), fingerprint.size());
    XXH3_128bits_update(state, &format_version, sizeof(format_version));
  }
  ~KeyHash() { XXH3_freeState(state); }
  KeyHash(const KeyHash&) = delete;
  KeyHash& operator=(const KeyHash&) = delete;
  void add(std::span<const int32_t> tokens) { XXH3_128bits_update(state, tokens.data(), tokens.size_bytes()); }
  std::string hex() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
  }
};

std::string name_of(size_t count, const std::string& hex) { return fmt::format("{}-{}{}", count, hex, kEntrySuffix); }

// A recency stamp: the wall clock, strictly increasing within this process so that the order of
// two uses is never a tie.
timespec next_stamp() {
  static std::atomic<int64_t> last{0};
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  int64_t ns = static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  int64_t prev = last.load();
  for (;;) {
    const int64_t stamp = std::max(ns, prev + 1);
    if (last.compare_exchange_weak(prev, stamp)) {
      ns = stamp;
      break;
    }
  }
  return timespec{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

void stamp_file(int fd) {
  const timespec now = next_stamp();
  const timespec times[2] = {now, now};
  ::futimens(fd, times);  // best effort: a failure only ages the entry
}

void write_all(int fd, const void* data, size_t size, const std::string& name) {
  const auto* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("prefix cache: {}: write failed: {}", name, std::strerror(n < 0 ? errno : EIO));
    at += n, size -= static_cast<size_t>(n);
  }
}

bool read_all(int fd, std::vector<std::byte>& out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The entries of `dir` now: name, size, recency. Files that vanish while listed are left out.
struct ListedEntry {
  int64_t used_ns;
  std::string name;
  uint64_t bytes;
};

std::vector<ListedEntry> list_entries(const std::string& dir) {
  std::vector<ListedEntry> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!split_entry_name(name)) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec, std::move(name),
                   static_cast<uint64_t>(st.st_size)});
  }
  return out;
}

// Removes `path` if it is still the file `fd` has open (a writer may have renamed a fresh entry
// over it since it was read).
void remove_if_same(const std::string& path, int fd) {
  struct stat held {}, now {};
  if (::fstat(fd, &held) == 0 && ::lstat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino)
    ::unlink(path.c_str());
}

}  // namespace

PrefixStore::PrefixStore(std::string dir, uint64_t byte_budget, std::string model_fingerprint, uint32_t format_version)
    : dir_(std::move(dir)), byte_budget_(byte_budget), fingerprint_(std::move(model_fingerprint)), format_version_(format_version) {
  if (dir_.empty()) fail("prefix cache directory: empty path");
  if (fingerprint_.size() > kPrefixEntryMaxFingerprint)
    fail("prefix cache: model fingerprint of {} bytes (at most {})", fingerprint_.size(), kPrefixEntryMaxFingerprint);
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) fail("prefix cache directory {}: cannot create: {}", dir_, ec.message());
  if (!std::filesystem::is_directory(dir_, ec)) fail("prefix cache directory {}: not a directory", dir_);
  if (::access(dir_.c_str(), W_OK | X_OK) != 0) fail("prefix cache directory {}: not writable: {}", dir_, std::strerror(errno));
}

std::string PrefixStore::entry_name(std::span<const int32_t> tokens) const {
  KeyHash key(fingerprint_, format_version_);
  key.add(tokens);
  return name_of(tokens.size(), key.hex());
}

bool PrefixStore::put(std::span<const int32_t> tokens, std::span<const std::byte> state) {
  if (tokens.empty() || prefix_entry_file_bytes(fingerprint_, tokens.size(), state.size()) > byte_budget_) return false;
  const std::vector<std::byte> head = prefix_entry_head(format_version_, fingerprint_, tokens, state.size());
  const std::string name = entry_name(tokens);
  const std::string path = (std::filesystem::path(dir_) / name).string();
  remove_stale_temporaries(dir_);
  // The temporary, locked while this process lives (util/atomic_file.hpp's convention, so its
  // cleaning applies); another process's cleaning may take it between mkstemp and flock: retry.
  const std::string pattern = (std::filesystem::path(dir_) / ("." + name + ".deltafin-tmp-XXXXXX")).string();
  std::string tmp;
  int fd = -1;
  for (;;) {
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    fd = ::mkstemp(buf.data());
    if (fd < 0) fail("prefix cache directory {}: cannot create a file: {}", dir_, std::strerror(errno));
    struct stat st {};
    if (::flock(fd, LOCK_EX) != 0 || ::fstat(fd, &st) != 0 || st.st_nlink > 0) {
      tmp = buf.data();
      break;
    }
    ::close(fd);
  }
  try {
    ::fchmod(fd, 0644);
    XXH3_state_t* sum = XXH3_createState();
    XXH3_64bits_reset(sum);
    XXH3_64bits_update(sum, head.data(), head.size());
    XXH3_64bits_update(sum, state.data(), state.size());
    const uint64_t checksum = XXH3_64bits_digest(sum);
    XXH3_freeState(sum);
    write_all(fd, head.data(), head.size(), tmp);
    write_all(fd, state.data(), state.size(), tmp);
    write_all(fd, &checksum, sizeof(checksum), tmp);
    stamp_file(fd);
    if (::fsync(fd) != 0) fail("prefix cache: {}: cannot sync: {}", tmp, std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("prefix cache: {}: cannot rename into place: {}", path, std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    ::close(fd);
    throw;
  }
  ::close(fd);
  const int dir_fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {  // the rename survives a crash only once the directory is synced
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  evict_to_budget();
  return true;
}

void PrefixStore::evict_to_budget() {
  std::vector<ListedEntry> entries = list_entries(dir_);
  uint64_t total = 0;
  for (const ListedEntry& e : entries) total += e.bytes;
  if (total <= byte_budget_) return;
  std::sort(entries.begin(), entries.end(),
            [](const ListedEntry& a, const ListedEntry& b) { return std::tie(a.used_ns, a.name) < std::tie(b.used_ns, b.name); });
  for (const ListedEntry& e : entries) {
    if (total <= byte_budget_) break;
    // Gone already (another process evicted it): as good.
    if (::unlink((std::filesystem::path(dir_) / e.name).c_str()) == 0) ++counts_.evictions;
    total -= e.bytes;
  }
}

bool PrefixStore::touch(std::span<const int32_t> tokens) {
  if (tokens.empty()) return false;
  const std::string path = (std::filesystem::path(dir_) / entry_name(tokens)).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  const bool entry = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (entry) stamp_file(fd);
  ::close(fd);
  return entry;
}

uint64_t PrefixStore::bytes_used() const {
  uint64_t total = 0;
  for (const ListedEntry& e : list_entries(dir_)) total += e.bytes;
  return total;
}

std::optional<PrefixHit> PrefixStore::longest_prefix(std::span<const int32_t> tokens) {
  // Candidates by name: for each saved length that fits, the name this prompt's prefix of that
  // length would have; the hash runs once over the prompt, digested at each such length.
  std::vector<std::pair<size_t, std::string>> named;  // count, hex
  for (const ListedEntry& e : list_entries(dir_)) {
    const std::optional<EntryName> n = split_entry_name(e.name);
    if (n->count >= 1 && n->count <= tokens.size()) named.emplace_back(n->count, n->hex);
  }
  std::sort(named.begin(), named.end());
  std::vector<std::pair<size_t, std::string>> matched;  // count, file name
  KeyHash key(fingerprint_, format_version_);
  size_t hashed = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    const size_t count = named[i].first;
    if (i > 0 && named[i - 1].first == count) continue;
    key.add(tokens.subspan(hashed, count - hashed));
    hashed = count;
    const std::string hex = key.hex();
    for (size_t j = i; j < named.size() && named[j].first == count; ++j)
      if (named[j].second == hex) matched.emplace_back(count, name_of(count, hex));
  }
  for (auto it = matched.rbegin(); it != matched.rend(); ++it) {
    const std::span<const int32_t> prefix = tokens.first(it->first);
    const std::string path = (std::filesystem::path(dir_) / it->second).string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // evicted meanwhile
    PrefixHit hit;
    hit.path = path;
    struct stat st {};
    std::string damaged;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      continue;
    }
    hit.bytes.resize(static_cast<size_t>(st.st_size));
    if (!read_all(fd, hit.bytes)) {
      damaged = "cannot be read whole";
    } else {
      try {
        const PrefixEntry entry = parse_prefix_entry(hit.bytes);
        if (entry.fingerprint != fingerprint_ || entry.format_version != format_version_) {
          spdlog::warn("prefix cache: {}: saved by another model or format (format version {}), ignored", path,
                       entry.format_version);
          ++counts_.ignored;
        } else if (!std::equal(entry.tokens.begin(), entry.tokens.end(), prefix.begin(), prefix.end())) {
          spdlog::warn("prefix cache: {}: its tokens differ from the prompt's prefix (a hash collision), ignored", path);
          ++counts_.ignored;
        } else {
          hit.positions = prefix.size();
          hit.state_offset = entry.payload_offset;
          hit.state_bytes = entry.payload.size();
          stamp_file(fd);
          ::close(fd);
          return hit;
        }
      } catch (const Error& e) {
        damaged = e.what();
      }
    }
    if (!damaged.empty()) {
      spdlog::warn("prefix cache: {}: {}; removed", path, damaged);
      ++counts_.ignored;
      remove_if_same(path, fd);
    }
    ::close(fd);
  }
  return std::nullopt;
}

}  // namespace deltafin
