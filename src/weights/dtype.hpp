// Element types that appear in safetensors files, with their on-disk names and sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace deltafin {

enum class DType : uint8_t { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

// Bytes per element.
constexpr uint64_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    default: return 1;
  }
}

// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);

// Parses a safetensors dtype string; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace deltafin
