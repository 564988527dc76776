// A token timeline's state as bytes (Session::save_state / load_state): a header the loading
// engine checks against its own shapes, then the family's payload. Layout, little-endian:
//   magic "DFSTATE1" (8) | family u32 | dimension count u32 | positions u64 | payload length u64 |
//   dimensions (i64 each) | payload
// K2 (family 2), dimensions {layers, kv_lora, rope, layers holding a cache}: per layer, the
//   latent rows c [positions, kv_lora] then k_pe [positions, rope], fp32.
// K3 (family 3), dimensions {layers, kv_lora, rope, MLA layers, recurrent bytes}: the MLA
//   layers' rows as K2's, then the recurrent buffer (per KDA layer its state, then its conv windows).
// The values are the backend's own results: bit-identical reloading holds within one backend
// (decode/prefix_cache.hpp keys entries by the backend as well as the model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace deltafin {

constexpr uint32_t kK2StateFamily = 2, kK3StateFamily = 3;
constexpr size_t kStateHeaderBytes = 32;  // magic .. payload length

// What an engine's state looks like at `positions`.
struct StateLayout {
  uint32_t family = 0;
  std::vector<int64_t> dims;
  int64_t positions = 0;
  uint64_t payload_bytes = 0;
};

// The header and dimensions of `layout`, with room reserved for the payload that follows.
std::vector<std::byte> state_bytes_head(const StateLayout& layout);

// The payload of `bytes` when its header matches `expected` (family, dimensions, positions,
// payload length, total size); else throws deltafin::Error in one line saying what differs.
std::span<const std::byte> state_bytes_payload(std::span<const std::byte> bytes, const StateLayout& expected);

}  // namespace deltafin
