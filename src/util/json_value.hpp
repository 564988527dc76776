// A JSON document held in memory with its object keys in the order they were written, as the
// chat templates see a request's `tools` and a tool call's arguments. Parsed from text with
// simdjson; written back the way Python's json.dumps (with ensure_ascii=False) writes it, which is
// what the official chat templates' `tojson` produces: spaced (", " and ": ") as transformers'
// tojson, or compact with sorted keys as Kimi K3's template writes tool declarations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin {

class JsonValue {
 public:
  enum class Type { Null, Bool, Integer, Float, String, Array, Object };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;
  static JsonValue boolean(bool b);
  static JsonValue integer(int64_t i);
  static JsonValue floating(double d);
  static JsonValue string(std::string s);
  static JsonValue array(std::vector<JsonValue> items = {});
  static JsonValue object(std::vector<Member> members = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_object() const { return type_ == Type::Object; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_string() const { return type_ == Type::String; }
  bool is_number() const { return type_ == Type::Integer || type_ == Type::Float; }

  bool as_bool() const { return bool_; }
  int64_t as_integer() const { return integer_; }
  double as_number() const { return type_ == Type::Integer ? static_cast<double>(integer_) : float_; }
  const std::string& as_string() const { return string_; }
  const std::vector<JsonValue>& items() const { return items_; }
  std::vector<JsonValue>& items() { return items_; }
  const std::vector<Member>& members() const { return members_; }
  std::vector<Member>& members() { return members_; }

  // An object's member by key (the first, should the text repeat one), or nullptr.
  const JsonValue* find(std::string_view key) const;

  bool operator==(const JsonValue& other) const;

 private:
  Type type_ = Type::Null;
  bool bool_ = false;
  int64_t integer_ = 0;
  double float_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
};

// Parses one JSON document (RFC 8259, as simdjson reads it); throws deltafin::Error with
// simdjson's reason when the text is not JSON. Integers past int64 are kept as floats.
JsonValue parse_json(std::string_view text);

struct JsonWriteStyle {
  bool compact = false;    // "," and ":" (else ", " and ": ", Python's default separators)
  bool sort_keys = false;  // object keys in code-point order (Python's sort_keys=True)
};

// Python's json.dumps(value, ensure_ascii=False) with the style's separators and key order:
// non-ASCII text kept as is, floats as Python's repr (1.0, 1e-05, 1e+16).
std::string write_json(const JsonValue& value, const JsonWriteStyle& style = {});

// A string as json.dumps writes it (quotes, \" \\ \n \r \t \b \f, other control bytes as \u00XX).
std::string python_json_string(std::string_view text);

}  // namespace deltafin
