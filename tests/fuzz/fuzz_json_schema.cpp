// libFuzzer target: the JSON Schema compiler of structured output (src/text/json_schema.cpp) and
// the matcher it drives. Any bytes that parse as JSON must either compile (strict and lenient) or
// be refused with a SchemaError naming a path; a compiled schema's matcher then takes the input's
// own bytes with marks and rewinds, never crashing, and ends as it was at each rewound mark.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "text/json_matcher.hpp"
#include "text/json_schema.hpp"
#include "util/json_value.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltafin;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  JsonValue schema;
  try {
    schema = parse_json(text);
  } catch (const Error&) {
    return 0;  // not JSON: serve refuses it before the compiler
  }
  for (SchemaMode mode : {SchemaMode::kStrict, SchemaMode::kLenient}) {
    std::shared_ptr<const CompiledSchema> compiled;
    try {
      compiled = std::make_shared<const CompiledSchema>(compile_json_schema(schema, mode));
    } catch (const SchemaError&) {
      continue;
    }
    JsonMatcher matcher(compiled);
    for (size_t i = 0; i < size; ++i) {
      const size_t mark = matcher.mark();
      const bool before = matcher.complete();
      matcher.push(data[(i * 7) % size]);
      matcher.rewind(mark);
      if (matcher.mark() != mark || matcher.complete() != before) __builtin_trap();
      matcher.push(data[i]);
    }
    if (matcher.closed() && !matcher.complete()) __builtin_trap();
  }
  return 0;
}
