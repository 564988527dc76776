// Safetensors dtype names.
#include "weights/dtype.hpp"

#include <array>
#include <utility>

namespace deltafin {
namespace {
constexpr std::array<std::pair<DType, std::string_view>, 15> kNames{{
    {DType::F64, "F64"}, {DType::F32, "F32"}, {DType::F16, "F16"}, {DType::BF16, "BF16"},
    {DType::F8_E4M3, "F8_E4M3"}, {DType::F8_E5M2, "F8_E5M2"}, {DType::I64, "I64"},
    {DType::I32, "I32"}, {DType::I16, "I16"}, {DType::I8, "I8"}, {DType::U64, "U64"},
    {DType::U32, "U32"}, {DType::U16, "U16"}, {DType::U8, "U8"}, {DType::BOOL, "BOOL"},
}};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& [type, name] : kNames)
    if (type == t) return name;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& [type, name_of] : kNames)
    if (name_of == name) return type;
  return std::nullopt;
}

}  // namespace deltafin
