// libFuzzer target: the messages between hosts (hosts/wire.hpp). Any input must either decode
// into a message that encodes back to the same bytes, or be refused with deltafin::Error; anything
// else (a crash, a sanitizer report, another exception, a round trip that differs) is a finding.
#include <cstddef>
#include <cstdint>

#include "hosts/wire.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const deltafin::hosts::Bytes bytes(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  try {
    const deltafin::hosts::Message m = deltafin::hosts::decode(bytes, 1);
    if (deltafin::hosts::encode(m) != bytes) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
