// The persistent prefix cache's directory (io/prefix_store.hpp, issue 36 item 3): round trip,
// longest prefix, damaged/truncated/foreign entries, LRU eviction within the byte budget,
// processes sharing one directory, a directory that cannot be made.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "io/prefix_entry.hpp"
#include "io/prefix_store.hpp"
#include "util/error.hpp"

#include "prefix_test_util.hpp"

namespace fs = std::filesystem;
using deltafin::PrefixHit;
using deltafin::PrefixStore;

namespace {

constexpr uint32_t kFormat = 3;
const std::string kFingerprint = "model-fingerprint-A";

using deltafin::test::LogCapture;
using deltafin::test::TempDir;

std::vector<int32_t> tokens_upto(int n, int32_t seed = 100) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(seed + i * 7);
  return t;
}

// A payload that is a function of the tokens it was saved under, so a reader can check what it got.
std::vector<std::byte> state_for(std::span<const int32_t> tokens, size_t bytes = 200) {
  std::vector<std::byte> out(bytes);
  uint32_t x = 2166136261u;
  for (const int32_t t : tokens) x = (x ^ static_cast<uint32_t>(t)) * 16777619u;
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 1103515245u + 12345u;
    out[i] = static_cast<std::byte>(x >> 24);
  }
  return out;
}

bool same(std::span<const std::byte> a, std::span<const std::byte> b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("a saved prefix comes back whole, for itself and for a longer prompt", "[prefix-store]") {
  TempDir dir("roundtrip");
  PrefixStore store(dir.path.string(), 1 << 20, kFingerprint, kFormat);
  REQUIRE(fs::is_directory(dir.path));
  const std::vector<int32_t> prompt = tokens_upto(50);
  const std::span<const int32_t> saved(prompt.data(), 30);
  const std::vector<std::byte> state = state_for(saved, 5000);
  REQUIRE(store.put(saved, state));
  CHECK_FALSE(store.longest_prefix(std::span<const int32_t>(prompt.data(), 29)));
  for (const size_t length : {size_t{30}, size_t{50}}) {
    const std::optional<PrefixHit> hit = store.longest_prefix(std::span<const int32_t>(prompt.data(), length));
    REQUIRE(hit);
    CHECK(hit->positions == 30);
    CHECK(same(hit->state(), state));
  }
  std::vector<int32_t> other = prompt;
  other[10] += 1;  // differs inside the saved prefix
  CHECK_FALSE(store.longest_prefix(other));
  // Another store of the same model and format on the directory (another process) finds it too;
  // another model or format does not.
  CHECK(PrefixStore(dir.path.string(), 1 << 20, kFingerprint, kFormat).longest_prefix(prompt));
  CHECK_FALSE(PrefixStore(dir.path.string(), 1 << 20, "model-fingerprint-B", kFormat).longest_prefix(prompt));
  CHECK_FALSE(PrefixStore(dir.path.string(), 1 << 20, kFingerprint, kFormat + 1).longest_prefix(prompt));
  // An empty payload is an entry like any other.
  const std::vector<int32_t> one = {7};
  REQUIRE(store.put(one, {}));
  const std::optional<PrefixHit> hit = store.longest_prefix(std::vector<int32_t>{7, 8});
  REQUIRE(hit);
  CHECK(hit->positions == 1);
  CHECK(hit->state().empty());
}

TEST_CASE("the longest saved prefix among several is the one returned", "[prefix-store]") {
  TempDir dir("longest");
  PrefixStore store(dir.path.string(), 1 << 20, kFingerprint, kFormat);
  const std::vector<int32_t> prompt = tokens_upto(100);
  for (const size_t length : {size_t{10}, size_t{40}, size_t{70}}) {
    const std::span<const int32_t> p(prompt.data(), length);
    REQUIRE(store.put(p, state_for(p)));
  }
  std::vector<int32_t> unrelated = tokens_upto(90, 5);  // longer, but no prefix of the prompt
  REQUIRE(store.put(unrelated, state_for(unrelated)));
  const std::vector<std::pair<size_t, size_t>> cases = {{9, 0}, {10, 10}, {39, 10}, {40, 40}, {69, 40}, {70, 70}, {100, 70}};
  for (const auto& [length, expected] : cases) {
    const std::span<const int32_t> query(prompt.data(), length);
    const std::optional<PrefixHit> hit = store.longest_prefix(query);
    INFO("prompt of " << length);
    if (expected == 0) {
      CHECK_FALSE(hit);
      continue;
    }
    REQUIRE(hit);
    CHECK(hit->positions == expected);
    CHECK(same(hit->state(), state_for(query.first(expected))));
  }
}

TEST_CASE("a damaged or truncated entry is never returned: one warning, and it is removed", "[prefix-store]") {
  TempDir dir("damaged");
  PrefixStore store(dir.path.string(), 1 << 20, kFingerprint, kFormat);
  const std::vector<int32_t> prompt = tokens_upto(20);
  const std::span<const int32_t> shorter(prompt.data(), 8);
  REQUIRE(store.put(shorter, state_for(shorter)));
  REQUIRE(store.put(prompt, state_for(prompt, 64)));
  const fs::path entry = dir.path / store.entry_name(prompt);
  const std::vector<char> good = read_bytes(entry);
  REQUIRE(good.size() == deltafin::prefix_entry_file_bytes(kFingerprint, prompt.size(), 64));
  // Every byte of the file in turn (header, fingerprint, tokens, payload, checksum), and truncations.
  std::vector<std::vector<char>> bad;
  for (size_t i = 0; i < good.size(); ++i) {
    bad.push_back(good);
    bad.back()[i] ^= 0x10;
  }
  for (const size_t keep : {size_t{0}, size_t{5}, size_t{39}, good.size() / 2, good.size() - 1}) bad.emplace_back(good.begin(), good.begin() + keep);
  std::vector<char> longer = good;
  longer.push_back(0);
  bad.push_back(longer);
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("damage " << i);
    write_bytes(entry, bad[i]);
    LogCapture log;
    const std::optional<PrefixHit> hit = store.longest_prefix(prompt);
    REQUIRE(hit);  // the shorter, intact entry
    CHECK(hit->positions == shorter.size());
    CHECK(same(hit->state(), state_for(shorter)));
    CHECK(log.lines() == 1);
    CHECK(log.text.str().find(entry.string()) != std::string::npos);
    CHECK(log.text.str().find("removed") != std::string::npos);
    CHECK_FALSE(fs::exists(entry));
  }
  write_bytes(entry, good);  // the same bytes intact again: found
  const std::optional<PrefixHit> hit = store.longest_prefix(prompt);
  REQUIRE(hit);
  CHECK(hit->positions == prompt.size());
}

TEST_CASE("a foreign entry (other model, other format, other tokens) is ignored with a warning and left alone",
          "[prefix-store]") {
  TempDir dir("foreign");
  PrefixStore store(dir.path.string(), 1 << 20, kFingerprint, kFormat);
  const std::vector<int32_t> prompt = tokens_upto(12);
  const fs::path entry = dir.path / store.entry_name(prompt);
  struct Foreign {
    std::string fingerprint;
    uint32_t format;
    std::vector<int32_t> tokens;
  };
  std::vector<int32_t> other_tokens = prompt;
  other_tokens.back() += 1;
  const std::vector<Foreign> cases = {{"model-fingerprint-B", kFormat, prompt}, {kFingerprint, kFormat + 1, prompt},
                                      {kFingerprint, kFormat, other_tokens}};
  for (const Foreign& f : cases) {
    // Saved by its own store, then put where this store looks (a copied file, a hash collision).
    PrefixStore theirs(dir.path.string(), 1 << 20, f.fingerprint, f.format);
    REQUIRE(theirs.put(f.tokens, state_for(f.tokens)));
    fs::rename(dir.path / theirs.entry_name(f.tokens), entry);
    LogCapture log;
    CHECK_FALSE(store.longest_prefix(prompt));
    CHECK(log.lines() == 1);
    CHECK(log.text.str().find(entry.string()) != std::string::npos);
    CHECK(fs::exists(entry));
    fs::remove(entry);
  }
}

TEST_CASE("eviction keeps the byte budget and drops the least recently used first, a hit refreshing", "[prefix-store]") {
  TempDir dir("evict");
  const uint64_t entry_bytes = deltafin::prefix_entry_file_bytes(kFingerprint, 4, 1000);
  PrefixStore store(dir.path.string(), 3 * entry_bytes + entry_bytes / 2, kFingerprint, kFormat);
  std::vector<std::vector<int32_t>> keys;
  for (int32_t k = 0; k < 6; ++k) keys.push_back({k, k + 1, k + 2, k + 3});
  auto put = [&](int k) { REQUIRE(store.put(keys[k], state_for(keys[k], 1000))); };
  auto present = [&](int k) { return fs::exists(dir.path / store.entry_name(keys[k])); };
  put(0), put(1), put(2);
  CHECK(store.bytes_used() == 3 * entry_bytes);
  REQUIRE(store.longest_prefix(keys[0]));  // 0 is now the most recent: 1 is the oldest
  put(3);
  CHECK(store.bytes_used() == 3 * entry_bytes);
  CHECK(present(0));
  CHECK_FALSE(present(1));
  CHECK(present(2));
  CHECK(present(3));
  put(4);  // drops 2
  CHECK_FALSE(present(2));
  CHECK(present(0));
  put(5);  // drops 0
  CHECK_FALSE(present(0));
  CHECK(present(3));
  CHECK(present(4));
  CHECK(present(5));
  CHECK(store.bytes_used() <= 3 * entry_bytes + entry_bytes / 2);
}

TEST_CASE("an entry larger than the budget is not stored, and evicts nothing", "[prefix-store]") {
  TempDir dir("toolarge");
  const std::vector<int32_t> small = {1, 2, 3};
  const uint64_t budget = deltafin::prefix_entry_file_bytes(kFingerprint, 3, 100) + 50;
  PrefixStore store(dir.path.string(), budget, kFingerprint, kFormat);
  REQUIRE(store.put(small, state_for(small, 100)));
  const std::vector<int32_t> big = {4, 5, 6};
  CHECK_FALSE(store.put(big, state_for(big, 200)));
  CHECK_FALSE(fs::exists(dir.path / store.entry_name(big)));
  CHECK(fs::exists(dir.path / store.entry_name(small)));
  CHECK_FALSE(store.put(std::vector<int32_t>{}, state_for(small, 1)));  // no tokens: nothing to key
}

TEST_CASE("processes writing, reading and evicting one directory never see a wrong or partial entry", "[prefix-store]") {
  TempDir dir("shared");
  const std::vector<int32_t> prompt = tokens_upto(64);
  // A budget of a few entries, so every put evicts: writers, readers and eviction all overlap.
  const uint64_t budget = 4 * deltafin::prefix_entry_file_bytes(kFingerprint, 64, 4096);
  constexpr int kProcesses = 4, kRounds = 150;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    int status = 0;  // the child: no Catch2 here, only an exit code
    try {
      PrefixStore store(dir.path.string(), budget, kFingerprint, kFormat);
      uint32_t x = 1234u + static_cast<uint32_t>(p);
      for (int round = 0; round < kRounds && status == 0; ++round) {
        x = x * 1103515245u + 12345u;
        const size_t length = 1 + (x >> 8) % prompt.size();
        const std::span<const int32_t> part(prompt.data(), length);
        if (round % 2 == 0) store.put(part, state_for(part, 1024 + (length * 48)));
        const std::optional<PrefixHit> hit = store.longest_prefix(prompt);
        if (hit && !same(hit->state(), state_for(std::span<const int32_t>(prompt.data(), hit->positions),
                                                 1024 + hit->positions * 48)))
          status = 2;
      }
    } catch (...) {
      status = 3;
    }
    ::_exit(status);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  // What is left: whole entries within the budget, no temporaries.
  PrefixStore store(dir.path.string(), budget, kFingerprint, kFormat);
  CHECK(store.bytes_used() <= budget);
  for (const auto& e : fs::directory_iterator(dir.path)) CHECK(e.path().extension() == ".dpc");
  LogCapture log;
  const std::optional<PrefixHit> hit = store.longest_prefix(prompt);
  if (hit) CHECK(same(hit->state(), state_for(std::span<const int32_t>(prompt.data(), hit->positions), 1024 + hit->positions * 48)));
  CHECK(log.lines() == 0);
}

TEST_CASE("a directory that cannot be made is one error line naming it", "[prefix-store]") {
  TempDir dir("baddir");
  fs::create_directories(dir.path);
  write_bytes(dir.path / "file", {'x'});
  for (const fs::path& bad : {dir.path / "file", dir.path / "file" / "sub"}) {
    try {
      PrefixStore store(bad.string(), 1 << 20, kFingerprint, kFormat);
      FAIL("no error for " << bad);
    } catch (const deltafin::Error& e) {
      const std::string message = e.what();
      CHECK(message.find(bad.string()) != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  }
}
