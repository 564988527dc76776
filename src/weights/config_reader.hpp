// Typed, checked access to the fields of a config.json object (simdjson DOM). Every error names
// the file and the field. Shared by the config parsers of the model families.
#pragma once

#include <simdjson.h>

#include <cmath>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "util/error.hpp"

namespace deltafin {

using simdjson::dom::element;
using simdjson::dom::object;

class ConfigReader {
 public:
  // A key given twice is refused: this reader would take the first value, Python's json the last.
  ConfigReader(object obj, const std::string& path) : obj_(obj), path_(path) {
    std::unordered_set<std::string_view> seen;
    for (auto field : obj_)
      if (!seen.insert(field.key).second) fail("{}: field '{}' appears twice", path_, field.key);
  }

  bool has(const char* key) const {
    element e;
    return obj_[key].get(e) == simdjson::SUCCESS && !e.is_null();
  }

  // An integer within +-2^31 (every count and size in a config; larger values are corrupt).
  int64_t integer(const char* key) const {
    constexpr double kLimit = 2147483647.0;
    element e = required(key);
    int64_t v;
    double d;
    if (e.get_int64().get(v) == simdjson::SUCCESS) d = static_cast<double>(v);
    else if (e.get_double().get(d) != simdjson::SUCCESS || d != std::floor(d))
      fail("{}: field '{}' must be an integer", path_, key);
    if (!(d >= -kLimit && d <= kLimit)) fail("{}: field '{}' is out of range ({})", path_, key, d);
    return static_cast<int64_t>(d);
  }
  int64_t integer(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

  // A finite float: 1e308 (inf as a float) or a value that is not a number is refused.
  float number(const char* key) const {
    element e = required(key);
    double d;
    int64_t i;
    if (e.get_double().get(d) != simdjson::SUCCESS) {
      if (e.get_int64().get(i) != simdjson::SUCCESS) fail("{}: field '{}' must be a number", path_, key);
      d = static_cast<double>(i);
    }
    const float f = static_cast<float>(d);
    if (!std::isfinite(f)) fail("{}: field '{}' is {}, outside the float range", path_, key, d);
    return f;
  }
  float number(const char* key, float fallback) const { return has(key) ? number(key) : fallback; }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    bool b;
    if (required(key).get_bool().get(b) != simdjson::SUCCESS) fail("{}: field '{}' must be true or false", path_, key);
    return b;
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    std::string_view s;
    if (required(key).get_string().get(s) != simdjson::SUCCESS) fail("{}: field '{}' must be a string", path_, key);
    return std::string(s);
  }

  // The first id when the field is a list (eos_token_id may be one).
  int64_t token_id(const char* key) const {
    if (!has(key)) return -1;
    element e = required(key);
    simdjson::dom::array arr;
    if (e.get_array().get(arr) == simdjson::SUCCESS) {
      for (element item : arr) {
        int64_t v;
        if (item.get_int64().get(v) == simdjson::SUCCESS) return v;
      }
      return -1;
    }
    return integer(key);
  }

  bool child(const char* key, object& out) const {
    element e;
    if (obj_[key].get(e) != simdjson::SUCCESS || e.is_null()) return false;
    if (e.get_object().get(out) != simdjson::SUCCESS) fail("{}: field '{}' must be an object", path_, key);
    return true;
  }

  // A list of integers (e.g. full_attn_layers); empty when absent.
  std::vector<int64_t> integers(const char* key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    simdjson::dom::array arr;
    if (required(key).get_array().get(arr) != simdjson::SUCCESS) fail("{}: field '{}' must be a list", path_, key);
    for (element item : arr) {
      int64_t v;
      if (item.get_int64().get(v) != simdjson::SUCCESS) fail("{}: field '{}' must hold integers", path_, key);
      out.push_back(v);
    }
    return out;
  }

 private:
  element required(const char* key) const {
    element e;
    if (obj_[key].get(e) != simdjson::SUCCESS || e.is_null()) fail("{}: missing field '{}'", path_, key);
    return e;
  }

  object obj_;
  const std::string& path_;
};

}  // namespace deltafin
