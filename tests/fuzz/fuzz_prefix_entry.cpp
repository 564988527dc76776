// libFuzzer target: the prefix cache's entry parser (io/prefix_entry.hpp). Any input must either
// parse into an entry that serializes back to the same bytes, or be refused with deltafin::Error;
// anything else (a crash, a sanitizer report, another exception, a round trip that differs) is a finding.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "io/prefix_entry.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    const deltafin::PrefixEntry e = deltafin::parse_prefix_entry(file);
    std::vector<std::byte> again = deltafin::prefix_entry_head(e.format_version, e.fingerprint, e.tokens, e.payload.size());
    if (again.size() != e.payload_offset) __builtin_trap();
    again.insert(again.end(), e.payload.begin(), e.payload.end());
    const uint64_t sum = XXH3_64bits(again.data(), again.size());
    const auto* s = reinterpret_cast<const std::byte*>(&sum);
    again.insert(again.end(), s, s + sizeof(sum));
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
