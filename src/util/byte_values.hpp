// Plain values written into and read out of byte vectors in the machine's order (little-endian,
// checked): the prefix cache's entries (io/prefix_entry) and session-state bytes (model/state_bytes).
// Reads do not check bounds: callers check the length first.
#pragma once

#include <bit>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

namespace deltafin {

static_assert(std::endian::native == std::endian::little, "byte values are little-endian");

template <typename T>
void put_value(std::vector<std::byte>& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

// n bytes from data appended (resize and copy: GCC 12 warns falsely on vector::insert of bytes).
inline void put_bytes(std::vector<std::byte>& out, const void* data, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, data, n);
}

template <typename T>
T get_value(std::span<const std::byte> bytes, size_t at) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

}  // namespace deltafin
