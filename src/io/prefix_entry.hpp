// One entry of the persistent prefix cache (io/prefix_store.hpp) as bytes on disk, and its
// parser: no files, no logging, so the parser is fuzzed on its own (tests/fuzz/fuzz_prefix_entry).
// Layout, little-endian:
//   magic "DFPREFX1" (8) | format_version u32 | fingerprint length u32 | token count u64 |
//   payload length u64 | fingerprint bytes | token ids (int32 each) | payload | XXH3-64 u64 of
//   every byte before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deltafin {

constexpr size_t kPrefixEntryHeaderBytes = 32;    // magic .. payload length
constexpr size_t kPrefixEntryChecksumBytes = 8;   // the XXH3-64 trailer
constexpr uint32_t kPrefixEntryMaxFingerprint = 4096;

// The bytes before the payload (header, fingerprint, tokens) of an entry whose payload has
// `payload_bytes` bytes.
std::vector<std::byte> prefix_entry_head(uint32_t format_version, const std::string& fingerprint,
                                         std::span<const int32_t> tokens, uint64_t payload_bytes);

// The size of the whole entry file.
uint64_t prefix_entry_file_bytes(const std::string& fingerprint, size_t token_count, uint64_t payload_bytes);

// A parsed entry; payload views the parsed bytes.
struct PrefixEntry {
  uint32_t format_version = 0;
  std::string fingerprint;
  std::vector<int32_t> tokens;
  std::span<const std::byte> payload;
  size_t payload_offset = 0;  // of payload within the parsed bytes
};

// Parses a whole entry file. Throws deltafin::Error with the reason (bad magic, truncated,
// lengths that disagree with the size, checksum mismatch) for anything that is not one intact entry.
PrefixEntry parse_prefix_entry(std::span<const std::byte> file);

}  // namespace deltafin
