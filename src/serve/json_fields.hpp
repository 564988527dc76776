// The typed field readers of the request parsers (request.cpp, chat_request.cpp), over simdjson's
// DOM: each names the field in the ApiError 400 it throws; null counts as absent.
#pragma once

#include <simdjson.h>

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>

#include "serve/api_error.hpp"

namespace deltafin::serve::json_fields {

using simdjson::dom::element;
using simdjson::dom::element_type;

[[noreturn]] inline void bad_field(const std::string& field, const std::string& expected) {
  throw ApiError(400, fmt::format("'{}' must be {}", field, expected), field);
}

// The field, or nullopt when absent or null.
inline std::optional<element> field(element object, const char* name) {
  element value;
  if (object[name].get(value) != simdjson::SUCCESS || value.type() == element_type::NULL_VALUE) return std::nullopt;
  return value;
}

inline std::string string_field(element value, const std::string& name) {
  std::string_view s;
  if (value.get_string().get(s) != simdjson::SUCCESS) bad_field(name, "a string");
  return std::string(s);
}

inline double number_field(element value, const std::string& name, double lo, double hi, const char* range) {
  double x;
  if (value.get_double().get(x) != simdjson::SUCCESS) bad_field(name, "a number");
  if (!(x >= lo && x <= hi)) bad_field(name, range);
  return x;
}

// An integer from lo to hi. JSON integers past int64 (simdjson: UINT64) are out of range, not
// wrapped; a number with a fraction or exponent is not an integer.
inline int64_t integer_field(element value, const std::string& name, int64_t lo, int64_t hi) {
  const std::string range = fmt::format("an integer from {} to {}", lo, hi);
  if (value.type() == element_type::UINT64) bad_field(name, range);
  int64_t x;
  if (value.type() != element_type::INT64 || value.get_int64().get(x) != simdjson::SUCCESS) bad_field(name, range);
  if (x < lo || x > hi) bad_field(name, range);
  return x;
}

inline bool bool_field(element value, const std::string& name) {
  bool b;
  if (value.get_bool().get(b) != simdjson::SUCCESS) bad_field(name, "a boolean");
  return b;
}

}  // namespace deltafin::serve::json_fields
