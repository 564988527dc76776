// The Hugging Face tokenizer.json tokenizer for byte-level BPE models (DeepSeek-V3, Qwen2/3,
// Llama-3 style): added tokens split out first (leftmost, longest), an optional NFC normalizer, a
// pre-tokenizer of Split(regex, run with PCRE2 UTF+UCP, JIT) and ByteLevel steps, then BPE by merge
// rank over the GPT-2 bytes_to_unicode alphabet. Ids match transformers.js / HF tokenizers.
#pragma once

#include "text/tokenizer.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin {

class HfBpeTokenizer final : public Tokenizer {
 public:
  struct Impl;
  explicit HfBpeTokenizer(std::unique_ptr<Impl> impl);
  ~HfBpeTokenizer() override;

  // allow_special: added tokens marked "special" are recognised in the text; otherwise they are
  // encoded as ordinary text. Non-special added tokens (e.g. Qwen's "<think>") are always
  // recognised, as in HF tokenizers. No BOS/EOS is added (the post_processor is not applied).
  //
  // Invalid UTF-8 is never rejected: the normalizer leaves invalid bytes alone, and for the regex
  // splits each byte that starts no valid UTF-8 sequence counts as one private-use character
  // (U+E000, category Co: no letter, number, mark, punctuation, symbol or space class matches it).
  // BPE then runs on the original bytes, so without a normalizer decode(encode(s)) == s for every
  // byte string; with NFC, decode(encode(s)) == normalize(s).
  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override;
  std::string token_bytes(int32_t id) const override;
  // Any added token (special or not) by its content.
  std::optional<int32_t> special_id(std::string_view text) const override;
  int32_t vocab_size() const override;

  // The tokenizer's normalizer applied to text (identity when tokenizer.json has none).
  std::string normalize(std::string_view text) const;
  // The pre-tokenizer's pieces of one text section (no added-token handling, no normalizer).
  std::vector<std::string> pre_tokenize(std::string_view text) const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Loads tokenizer.json. Errors name the file and the field (one line): missing file, broken JSON,
// a model that is not BPE, a merge naming an unknown token, an unsupported normalizer or
// pre-tokenizer type, a regex PCRE2 rejects.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path);
// The same from the file's text (`path` only names it in errors): the fuzzers' entry point.
std::unique_ptr<Tokenizer> parse_hf_tokenizer(std::string_view json, const std::string& path);

}  // namespace deltafin
