// The tiktoken tokenizer: a ranks file ("<base64 bytes> <rank>" per line, token id == rank), a
// regex split pattern (run with PCRE2, JIT-compiled) and special tokens. Encoding is tiktoken's
// byte-pair encoding exactly; Kimi's tiktoken.model and OpenAI .tiktoken files both load here.
#pragma once

#include "text/tokenizer.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deltafin {

// OpenAI o200k_base's pat_str, verbatim from js-tiktoken 1.0.21 (JS spells Python's
// (?i:'s|'t|...) out as ('s|'S|'t|'T|...), so "'ſ" does not count as a contraction here).
extern const char kO200kPatStr[];
// Kimi's pat_str, verbatim from tokenization_kimi.py (model-spec-k2.md 5.1). Rust-regex syntax:
// it uses class intersection (&&), which PCRE2 lacks; pass it through tiktoken_pattern_to_pcre2().
extern const char kKimiPatStr[];

// Rewrites a tiktoken (Rust regex / Python `regex`) pattern into an equivalent PCRE2 pattern:
//  * each intersected class [X&&[^Y]] becomes (?:(?![Y])[X]) (a character of X that is not in Y);
//  * \p{Han} becomes \p{sc:Han}: in Rust's regex crate and Python's `regex` a bare script name is
//    the Script property, while PCRE2 >= 10.40 reads it as Script_Extensions (which would also
//    take "。" and "、").
// Everything else is kept verbatim (PCRE2's UCP \s already includes U+0085 like Rust's).
std::string tiktoken_pattern_to_pcre2(std::string_view pattern);

// PCRE2 split patterns, ready for TiktokenTokenizer.
std::string o200k_split_pattern();
std::string kimi_split_pattern();

using SpecialTokens = std::vector<std::pair<std::string, int32_t>>;  // text -> id

class PieceSplitter;

class TiktokenTokenizer final : public Tokenizer {
 public:
  // tokens[rank] = the bytes of that rank (empty: no token has that rank). `pcre2_pattern` is a
  // PCRE2 pattern (see above). `source` names the ranks file in error messages. Every single byte
  // must be a token (tiktoken's BPE starts from single bytes).
  TiktokenTokenizer(std::vector<std::string> tokens, const std::string& pcre2_pattern,
                    SpecialTokens specials, const std::string& source);
  ~TiktokenTokenizer() override;

  // Invalid UTF-8 is never rejected. For the regex split, each byte that is not part of a valid
  // UTF-8 sequence (stray continuation, truncated or overlong sequence, surrogate, > U+10FFFF) is
  // one "character" of general category Co (private use): no letter, number, mark or space class
  // matches it, so it joins the punctuation/other alternative ( ?[^\s\p{L}\p{N}]+). BPE then runs
  // on the original bytes, so decode(encode(s)) == s for every byte string.
  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override;
  std::string token_bytes(int32_t id) const override;
  std::optional<int32_t> special_id(std::string_view text) const override;
  int32_t vocab_size() const override { return vocab_size_; }

  // The regex pieces of text (no special-token handling): for tests of the splitter.
  // ascii_fast_path = false runs PCRE2 alone, without the hand-written ASCII matcher.
  std::vector<std::string> split(std::string_view text, bool ascii_fast_path = true) const;
  int32_t num_base_tokens() const { return static_cast<int32_t>(offsets_.size()) - 1; }

 private:
  struct Slot {
    uint32_t tag;  // upper hash bits, to skip most byte comparisons
    int32_t id;    // -1: empty
  };

  int32_t rank_of(const char* p, size_t n) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(const char* p, size_t n, std::vector<int32_t>& out) const;
  // Position and id of the leftmost (longest) special token in text[from..], or npos.
  size_t find_special(std::string_view text, size_t from, int32_t& id, size_t& len) const;

  std::string bytes_;              // all base tokens, concatenated by rank
  std::vector<uint32_t> offsets_;  // token r is bytes_[offsets_[r], offsets_[r + 1])
  std::vector<Slot> slots_;        // open addressing: bytes -> rank
  uint64_t mask_ = 0;
  std::unique_ptr<PieceSplitter> splitter_;
  SpecialTokens specials_;                     // sorted by first byte, then longest first
  std::unordered_map<int32_t, std::string> special_text_;  // id -> text
  std::vector<uint16_t> special_first_[256];   // indices into specials_, by first byte
  bool special_start_[256] = {};
  int32_t vocab_size_ = 0;
};

// The tokens of a ranks file's text, by rank (`path` only names it in errors; one line naming
// the line for a bad one). The fuzzers' entry point.
std::vector<std::string> parse_tiktoken_ranks(std::string_view data, const std::string& path);

// Loads a ranks file and builds a tokenizer with the given PCRE2 pattern and special tokens.
// Errors (one line naming the file and line): missing file, a line that is not "<base64> <int>",
// bad base64, duplicate rank or duplicate token bytes.
std::unique_ptr<TiktokenTokenizer> make_tiktoken_tokenizer(const std::string& ranks_path,
                                                           const std::string& pcre2_pattern,
                                                           SpecialTokens specials);

// Kimi's layout: dir/tiktoken.model + dir/tokenizer_config.json (added_tokens_decoder names the
// special ids; the unnamed ones among num_base .. num_base+255 are <|reserved_token_{id}|>), split
// with Kimi's pattern.
std::unique_ptr<Tokenizer> load_tiktoken_model_dir(const std::string& dir);

}  // namespace deltafin
