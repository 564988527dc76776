// Tokenizers behind one interface: text <-> token ids. Implementations: the tiktoken format
// (Kimi's tiktoken.model, OpenAI .tiktoken files) and Hugging Face tokenizer.json byte-level BPE.
// load_tokenizer() picks the one a model directory ships.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes UTF-8 (or arbitrary bytes: invalid UTF-8 is encoded byte by byte, never rejected).
  // Special-token text (e.g. "<|im_end|>") becomes its control token when allow_special.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special) const = 0;

  // The raw bytes of one token (special tokens: their text). Empty for unknown ids.
  virtual std::string token_bytes(int32_t id) const = 0;

  // Concatenated token bytes (may end in the middle of a UTF-8 character).
  std::string decode(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
  }

  // The id of a special token by its text ("<|im_end|>", "[EOS]"), if the vocabulary has it.
  virtual std::optional<int32_t> special_id(std::string_view text) const = 0;

  virtual int32_t vocab_size() const = 0;
};

// Loads the tokenizer of a model directory: tiktoken.model (+ tokenizer_config.json) or
// tokenizer.json. Throws deltafin::Error naming the file when missing or corrupt.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir);

}  // namespace deltafin
