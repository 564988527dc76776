// The hash of generated token ids that the receipt prints and the server returns as its
// system_fingerprint: XXH3-64 of the ids' int32 bytes, written "xxh3:%016x".
#pragma once

#include <xxhash.h>

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin {

inline uint64_t ids_hash(const std::vector<int32_t>& ids) { return XXH3_64bits(ids.data(), ids.size() * sizeof(int32_t)); }

inline std::string ids_hash_text(const std::vector<int32_t>& ids) { return fmt::format("xxh3:{:016x}", ids_hash(ids)); }

}  // namespace deltafin
