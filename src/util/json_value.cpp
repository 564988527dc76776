// JsonValue, its parser (simdjson's DOM, copied into ordered members) and its writer (see
// json_value.hpp).
#include "util/json_value.hpp"

#include <simdjson.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace deltafin {

JsonValue JsonValue::boolean(bool b) {
  JsonValue v;
  v.type_ = Type::Bool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::integer(int64_t i) {
  JsonValue v;
  v.type_ = Type::Integer;
  v.integer_ = i;
  return v;
}

JsonValue JsonValue::floating(double d) {
  JsonValue v;
  v.type_ = Type::Float;
  v.float_ = d;
  return v;
}

JsonValue JsonValue::string(std::string s) {
  JsonValue v;
  v.type_ = Type::String;
  v.string_ = std::move(s);
  return v;
}

JsonValue JsonValue::array(std::vector<JsonValue> items) {
  JsonValue v;
  v.type_ = Type::Array;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::object(std::vector<Member> members) {
  JsonValue v;
  v.type_ = Type::Object;
  v.members_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const Member& m : members_)
    if (m.first == key) return &m.second;
  return nullptr;
}

bool JsonValue::operator==(const JsonValue& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::Null: return true;
    case Type::Bool: return bool_ == o.bool_;
    case Type::Integer: return integer_ == o.integer_;
    case Type::Float: return float_ == o.float_;
    case Type::String: return string_ == o.string_;
    case Type::Array: return items_ == o.items_;
    default: return members_ == o.members_;
  }
}

namespace {

JsonValue from_element(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE: return JsonValue();
    case element_type::BOOL: return JsonValue::boolean(e.get_bool().value_unsafe());
    case element_type::INT64: return JsonValue::integer(e.get_int64().value_unsafe());
    case element_type::UINT64: return JsonValue::floating(static_cast<double>(e.get_uint64().value_unsafe()));
    case element_type::DOUBLE: return JsonValue::floating(e.get_double().value_unsafe());
    case element_type::STRING: return JsonValue::string(std::string(e.get_string().value_unsafe()));
    case element_type::ARRAY: {
      std::vector<JsonValue> items;
      simdjson::dom::array array;
      if (e.get_array().get(array) == simdjson::SUCCESS)
        for (simdjson::dom::element item : array) items.push_back(from_element(item));
      return JsonValue::array(std::move(items));
    }
    default: {
      std::vector<JsonValue::Member> members;
      simdjson::dom::object object;
      if (e.get_object().get(object) == simdjson::SUCCESS)
        for (simdjson::dom::key_value_pair kv : object)
        members.emplace_back(std::string(kv.key), from_element(kv.value));
      return JsonValue::object(std::move(members));
    }
  }
}

// Python's float repr: the shortest text that reads back to the same double, "e" notation
// from 1e16 and below 1e-4, and ".0" on integral values.
std::string python_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

void write(const JsonValue& v, const JsonWriteStyle& style, std::string& out) {
  const char* item_sep = style.compact ? "," : ", ";
  const char* key_sep = style.compact ? ":" : ": ";
  switch (v.type()) {
    case JsonValue::Type::Null: out += "null"; break;
    case JsonValue::Type::Bool: out += v.as_bool() ? "true" : "false"; break;
    case JsonValue::Type::Integer: out += std::to_string(v.as_integer()); break;
    case JsonValue::Type::Float: out += python_float(v.as_number()); break;
    case JsonValue::Type::String: out += python_json_string(v.as_string()); break;
    case JsonValue::Type::Array:
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        write(v.items()[i], style, out);
      }
      out += ']';
      break;
    case JsonValue::Type::Object: {
      std::vector<const JsonValue::Member*> members;
      for (const JsonValue::Member& m : v.members()) members.push_back(&m);
      if (style.sort_keys)  // UTF-8 byte order is code-point order
        std::stable_sort(members.begin(), members.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += item_sep;
        out += python_json_string(members[i]->first);
        out += key_sep;
        write(members[i]->second, style, out);
      }
      out += '}';
    }
  }
}

}  // namespace

JsonValue parse_json(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(text.data(), text.size()).get(root)) fail("{}", simdjson::error_message(err));
  return from_element(root);
}

std::string write_json(const JsonValue& value, const JsonWriteStyle& style) {
  std::string out;
  write(value, style, out);
  return out;
}

std::string python_json_string(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + '"';
}

}  // namespace deltafin
