// The prefix cache's entry bytes (see prefix_entry.hpp).
#include "io/prefix_entry.hpp"

#include <xxhash.h>

#include <cstring>

#include "util/byte_values.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

constexpr char kMagic[8] = {'D', 'F', 'P', 'R', 'E', 'F', 'X', '1'};

}  // namespace

std::vector<std::byte> prefix_entry_head(uint32_t format_version, const std::string& fingerprint,
                                         std::span<const int32_t> tokens, uint64_t payload_bytes) {
  if (fingerprint.size() > kPrefixEntryMaxFingerprint)
    fail("prefix cache: model fingerprint of {} bytes (at most {})", fingerprint.size(), kPrefixEntryMaxFingerprint);
  std::vector<std::byte> out;
  out.reserve(kPrefixEntryHeaderBytes + fingerprint.size() + tokens.size_bytes());
  put_bytes(out, kMagic, sizeof(kMagic));
  put_value<uint32_t>(out, format_version);
  put_value<uint32_t>(out, static_cast<uint32_t>(fingerprint.size()));
  put_value<uint64_t>(out, tokens.size());
  put_value<uint64_t>(out, payload_bytes);
  put_bytes(out, fingerprint.data(), fingerprint.size());
  put_bytes(out, tokens.data(), tokens.size_bytes());
  return out;
}

uint64_t prefix_entry_file_bytes(const std::string& fingerprint, size_t token_count, uint64_t payload_bytes) {
  return kPrefixEntryHeaderBytes + fingerprint.size() + token_count * sizeof(int32_t) + payload_bytes +
         kPrefixEntryChecksumBytes;
}

PrefixEntry parse_prefix_entry(std::span<const std::byte> file) {
  if (file.size() < kPrefixEntryHeaderBytes + kPrefixEntryChecksumBytes)
    fail("truncated ({} bytes, less than a header)", file.size());
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) fail("not a prefix cache entry (bad magic)");
  PrefixEntry entry;
  entry.format_version = get_value<uint32_t>(file, 8);
  const uint32_t fingerprint_bytes = get_value<uint32_t>(file, 12);
  const uint64_t token_count = get_value<uint64_t>(file, 16);
  const uint64_t payload_bytes = get_value<uint64_t>(file, 24);
  // Each length is bounded by the file's size before any sum, so nothing overflows.
  const uint64_t room = file.size() - kPrefixEntryHeaderBytes - kPrefixEntryChecksumBytes;
  if (fingerprint_bytes > kPrefixEntryMaxFingerprint || fingerprint_bytes > room || token_count > room / sizeof(int32_t) ||
      payload_bytes > room || fingerprint_bytes + token_count * sizeof(int32_t) + payload_bytes != room)
    fail("truncated or damaged: {} bytes where the header's lengths (fingerprint {}, {} tokens, payload {}) say otherwise",
         file.size(), fingerprint_bytes, token_count, payload_bytes);
  const size_t body = file.size() - kPrefixEntryChecksumBytes;
  if (XXH3_64bits(file.data(), body) != get_value<uint64_t>(file, body)) fail("checksum mismatch");
  size_t at = kPrefixEntryHeaderBytes;
  entry.fingerprint.assign(reinterpret_cast<const char*>(file.data() + at), fingerprint_bytes);
  at += fingerprint_bytes;
  entry.tokens.resize(token_count);
  std::memcpy(entry.tokens.data(), file.data() + at, token_count * sizeof(int32_t));
  at += token_count * sizeof(int32_t);
  entry.payload = file.subspan(at, payload_bytes);
  entry.payload_offset = at;
  return entry;
}

}  // namespace deltafin
