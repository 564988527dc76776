// libFuzzer target: tiktoken ranks files (tiktoken.model). Any input must parse into tokens or be
// refused with deltafin::Error; the table never grows past the bound the parser states.
#include <cstddef>
#include <cstdint>
#include <string>

#include "text/tiktoken_tokenizer.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto tokens = deltafin::parse_tiktoken_ranks(text, "fuzz/tiktoken.model");
    if (tokens.empty() || tokens.size() > 2 * (size + 1) + 1024) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
