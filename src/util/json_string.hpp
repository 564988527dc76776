// A string as a JSON string literal: quotes, backslashes and control characters escaped (the
// manifest's paths, the receipt's names).
#pragma once

#include <fmt/format.h>

#include <string>

namespace deltafin {

inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) out += fmt::format("\\u{:04x}", c);
    else out += static_cast<char>(c);
  }
  return out + '"';
}

}  // namespace deltafin
