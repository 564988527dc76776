// A token timeline's state as bytes: the header (see state_bytes.hpp).
#include "model/state_bytes.hpp"

#include <cstring>

#include "util/byte_values.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

constexpr char kMagic[8] = {'D', 'F', 'S', 'T', 'A', 'T', 'E', '1'};

const char* family_name(uint32_t family) {
  return family == kK2StateFamily ? "kimi_k2" : family == kK3StateFamily ? "kimi_k3" : "unknown";
}

}  // namespace

std::vector<std::byte> state_bytes_head(const StateLayout& layout) {
  std::vector<std::byte> out;
  out.reserve(kStateHeaderBytes + layout.dims.size() * sizeof(int64_t) + layout.payload_bytes);
  put_bytes(out, kMagic, sizeof(kMagic));
  put_value<uint32_t>(out, layout.family);
  put_value<uint32_t>(out, static_cast<uint32_t>(layout.dims.size()));
  put_value<uint64_t>(out, static_cast<uint64_t>(layout.positions));
  put_value<uint64_t>(out, layout.payload_bytes);
  for (int64_t d : layout.dims) put_value<int64_t>(out, d);
  return out;
}

std::span<const std::byte> state_bytes_payload(std::span<const std::byte> bytes, const StateLayout& expected) {
  if (bytes.size() < kStateHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    fail("saved state: not a deltafin session state ({} bytes without its header)", bytes.size());
  const uint32_t family = get_value<uint32_t>(bytes, 8), count = get_value<uint32_t>(bytes, 12);
  const uint64_t positions = get_value<uint64_t>(bytes, 16), payload = get_value<uint64_t>(bytes, 24);
  if (family != expected.family)
    fail("saved state: of a {} model, this engine runs {}", family_name(family), family_name(expected.family));
  if (count != expected.dims.size() || bytes.size() < kStateHeaderBytes + count * sizeof(int64_t))
    fail("saved state: {} shape values, this engine has {}", count, expected.dims.size());
  for (uint32_t i = 0; i < count; ++i) {
    const int64_t d = get_value<int64_t>(bytes, kStateHeaderBytes + i * sizeof(int64_t));
    if (d != expected.dims[i]) fail("saved state: shape value {} is {}, this engine's is {}", i, d, expected.dims[i]);
  }
  if (positions != static_cast<uint64_t>(expected.positions))
    fail("saved state: holds {} positions, the tokens given are {}", positions, expected.positions);
  const size_t head = kStateHeaderBytes + count * sizeof(int64_t);
  if (payload != expected.payload_bytes || bytes.size() - head != payload)
    fail("saved state: {} payload bytes ({} stated), {} expected", bytes.size() - head, payload, expected.payload_bytes);
  return bytes.subspan(head);
}

}  // namespace deltafin
