// libFuzzer target: the session state header check (model/state_bytes.hpp). The first input byte
// picks the positions a K2-shaped engine expects (0..7), the rest is the state bytes: they must
// either be refused with deltafin::Error or be exactly that layout's header and payload.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "model/state_bytes.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t positions = data[0] % 8;
  // k2_tiny's shapes: 3 layers of latent rows [kv_lora 48 + rope 16] fp32.
  const deltafin::StateLayout layout{deltafin::kK2StateFamily, {3, 48, 16, 3}, positions,
                                     static_cast<uint64_t>(positions) * 3 * 64 * 4};
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  try {
    const std::span<const std::byte> payload = deltafin::state_bytes_payload(bytes, layout);
    std::vector<std::byte> again = deltafin::state_bytes_head(layout);
    again.insert(again.end(), payload.begin(), payload.end());
    if (again.size() != bytes.size() || std::memcmp(again.data(), bytes.data(), bytes.size()) != 0) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
