// The persistent prefix cache's directory (issue 36 item 3): opaque session-state bytes saved
// under a token prefix, found again by the longest saved prefix of a later prompt.
//   Entries:   "<token count>-<32 hex>.dpc", the hex the XXH3-128 of (model fingerprint, format
//              version, token ids); contents io/prefix_entry.hpp (the tokens themselves, so a hash
//              collision is caught, and an XXH3-64 checksum of the whole file).
//   Writes:    a temporary ".<name>.deltafin-tmp-XXXXXX" (held under flock while its writer
//              lives, util/atomic_file.hpp), fsync, rename over the name, fsync of the directory:
//              readers see a whole entry or none. Temporaries of dead writers are removed by the next put.
//   Recency:   an entry's mtime, set explicitly when written and on every hit (strictly increasing
//              within a process). Eviction after each put drops the oldest entries of the
//              directory (of every model sharing it) until they fit the byte budget; files that
//              vanish meanwhile (another process evicted them) are skipped.
//   Bad files: a damaged or truncated entry is ignored with one warning naming it and removed; a
//              foreign one (another fingerprint or format version, other tokens) is ignored with
//              one warning and left alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace deltafin {

// A saved prefix found for a prompt: the prompt's first `positions` tokens are covered by `state()`.
struct PrefixHit {
  size_t positions = 0;
  std::string path;              // the entry's file
  std::vector<std::byte> bytes;  // the whole entry file
  size_t state_offset = 0, state_bytes = 0;
  std::span<const std::byte> state() const { return {bytes.data() + state_offset, state_bytes}; }
};

// What the store did so far (this object's calls).
struct PrefixStoreCounts {
  uint64_t evictions = 0;  // entries removed to keep the budget
  uint64_t ignored = 0;    // damaged, truncated or foreign entries passed over (one warning each)
};

class PrefixStore {
 public:
  // Creates `dir` when missing; throws deltafin::Error naming it when it cannot be created or
  // is not a writable directory.
  PrefixStore(std::string dir, uint64_t byte_budget, std::string model_fingerprint, uint32_t format_version);

  // Saves `state` under `tokens` (replacing an entry of the same tokens), then evicts least
  // recently used entries until the directory fits the budget. Returns false (stores nothing)
  // when the entry alone exceeds the budget or `tokens` is empty. Throws Error naming the file on
  // a failed write (a full disk, say); the cache stays consistent.
  bool put(std::span<const int32_t> tokens, std::span<const std::byte> state);

  // The longest saved entry of this model and format whose tokens are a prefix of `tokens`
  // (possibly all of them); marks it recently used. Never throws for bad entries.
  std::optional<PrefixHit> longest_prefix(std::span<const int32_t> tokens);

  // Marks the entry saved under exactly `tokens` recently used; false when there is none.
  bool touch(std::span<const int32_t> tokens);

  const PrefixStoreCounts& counts() const { return counts_; }

  // Entry bytes in the directory now (every model's), for tests and reports.
  uint64_t bytes_used() const;

  // The entry file name `tokens` is saved under (no directory).
  std::string entry_name(std::span<const int32_t> tokens) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  uint64_t byte_budget_;
  std::string fingerprint_;
  uint32_t format_version_;
  PrefixStoreCounts counts_;

  void evict_to_budget();
};

}  // namespace deltafin
