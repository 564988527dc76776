// libFuzzer target: encoding arbitrary bytes through the bundled model's tokenizer (byte-level
// BPE) and its chat format. Every id lies inside the vocabulary and, without special-token
// parsing, decode(encode(s)) == s byte for byte (invalid UTF-8 included).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "text/chat_format.hpp"
#include "text/hf_bpe_tokenizer.hpp"
#include "util/error.hpp"

namespace {
const deltafin::Tokenizer& tokenizer() {
  static const std::unique_ptr<deltafin::Tokenizer> t =
      deltafin::load_hf_tokenizer(DELTAFIN_SOURCE_DIR "/models/default/tokenizer.json");
  return *t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const deltafin::Tokenizer& t = tokenizer();
  const auto plain = t.encode(text, false);
  for (int32_t id : plain)
    if (id < 0 || id >= t.vocab_size()) __builtin_trap();
  if (t.decode(plain) != text) __builtin_trap();
  for (int32_t id : t.encode(text, true))
    if (id < 0 || id >= t.vocab_size()) __builtin_trap();
  try {
    const deltafin::ChatStyle style = deltafin::detect_chat_style(t);
    const auto ids = deltafin::encode_segments(t, deltafin::render_chat(style, {{"user", text}}, true));
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) __builtin_trap();
  } catch (const deltafin::Error&) {  // a tokenizer without a chat format's control tokens
  }
  return 0;
}
