// libFuzzer target: tokenizer.json loading. Any input must load into a tokenizer or be refused
// with deltafin::Error; a tokenizer that loads must encode text into ids inside its vocabulary.
#include <cstddef>
#include <cstdint>
#include <string>

#include "text/hf_bpe_tokenizer.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const auto t = deltafin::parse_hf_tokenizer(json, "fuzz/tokenizer.json");
    for (const bool special : {false, true})
      for (int32_t id : t->encode("Hello, world! <|endoftext|> \xc3\xa9\xff 123", special))
        if (id < 0 || id >= t->vocab_size()) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
