// A JSON Schema compiled for constrained sampling (json_matcher.hpp): the supported subset
// (docs/structured-output.md) turned into a table of nodes. Strict mode (response_format) refuses
// every other keyword with a SchemaError naming its path inside the schema
// ("properties.age.minimum"); lenient mode (tool parameters) ignores them, so the constraint is
// weaker than the schema (a document may break what was ignored) but never refuses what it allows.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <deltafin/error.hpp>

#include "util/json_value.hpp"

namespace deltafin {

// A keyword the compiler refuses (or a schema that no document satisfies): `path` is where it is
// inside the schema, dot-separated ("properties.age.minimum", "anyOf.1.type"; "" = the top).
class SchemaError : public Error {
 public:
  SchemaError(std::string path, const std::string& reason)
      : Error((path.empty() ? std::string("schema") : path) + ": " + reason), path(std::move(path)) {}
  std::string path;
};

enum class SchemaMode { kStrict, kLenient };

// JSON types a value may take (bits); kInteger alone admits integers only, kNumber any number.
enum SchemaType : uint8_t {
  kTypeNull = 1, kTypeBoolean = 2, kTypeInteger = 4, kTypeNumber = 8, kTypeString = 16, kTypeArray = 32,
  kTypeObject = 64, kTypeAny = 127
};

struct SchemaProperty {
  std::string name;      // the key as it is (decoded)
  std::string key_text;  // the key as written after its opening quote: json.dumps's form and the closing quote
  int32_t node = 0;      // its value's schema; kNever: the key may not appear
  bool required = false;
};

struct SchemaNode {
  static constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
  uint8_t types = kTypeAny;
  std::vector<SchemaProperty> properties;  // at most 64
  int32_t additional = 0;                  // other keys' values: a node, or kNever (not allowed)
  int32_t items = 0;                       // array items' node
  uint32_t min_items = 0, max_items = kUnbounded;
  uint32_t min_length = 0, max_length = kUnbounded;  // strings, in code points
  bool has_literals = false;               // enum / const: the value is one of `literals`
  std::vector<int32_t> literals;           // ids into CompiledSchema::literals
  std::vector<int32_t> any_of;             // non-empty: the value matches one of these (the node's own keywords unused)
};

struct CompiledSchema {
  static constexpr int32_t kNever = -1;
  static constexpr int32_t kAnyNode = 0;  // nodes[0]: any JSON value
  // Literal texts (enum/const values written compactly as json.dumps does); ids 0..2 are true, false, null.
  std::vector<std::string> literals{"true", "false", "null"};
  std::vector<SchemaNode> nodes{SchemaNode{}};
  int32_t root = 0;
};

// Compiles a schema (its top level must describe an object). Throws SchemaError.
CompiledSchema compile_json_schema(const JsonValue& schema, SchemaMode mode);
// response_format {"type": "json_object"}: any JSON object.
CompiledSchema json_object_schema();

}  // namespace deltafin
