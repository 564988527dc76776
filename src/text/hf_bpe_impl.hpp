// Internal to the tokenizer.json BPE tokenizer (hf_bpe_tokenizer.cpp encodes, hf_bpe_loader.cpp
// loads): the state behind HfBpeTokenizer::Impl and the types it holds: the PCRE2 split regex,
// split steps, the merge table and added tokens. Not a public header.
#pragma once

#include "text/hf_bpe_tokenizer.hpp"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <unicode/normalizer2.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace deltafin {

namespace hf_bpe {

// ---------------------------------------------------------------------------------------------
// PCRE2 regex

struct MatchState {
  pcre2_match_data* md = pcre2_match_data_create(16, nullptr);
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchState() {
    pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (stack) pcre2_jit_stack_free(stack);
  }
  void grow_stack() {  // a very long run: give JIT a big stack (kept for this thread)
    if (stack) return;
    mctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(1 << 16, 1 << 30, nullptr);
    pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
};

class Regex {
 public:
  // Compiles a tokenizer.json pattern (Oniguruma syntax, or a literal string); errors name `where`.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls fn(b, e) for every non-empty match in the subject s[0, n) (valid UTF-8), left to right,
  // as JavaScript's matchAll does (an empty match moves on by one character).
  template <typename Fn>
  void for_each_match(const unsigned char* s, size_t n, Fn&& fn) const {
    static thread_local MatchState st;
    size_t off = 0;
    while (off < n) {
      int rc = jit_ ? pcre2_jit_match(code_, s, n, off, 0, st.md, st.mctx)
                    : pcre2_match(code_, s, n, off, PCRE2_NO_UTF_CHECK, st.md, st.mctx);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !st.stack) {
        st.grow_stack();
        continue;
      }
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) fail("tokenizer.json: a split regex failed on the text (PCRE2 error {})", rc);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
      const size_t b = ov[0], e = ov[1];
      if (e > b) {
        fn(b, e);
        off = e;
      } else {
        off = b + 1;
        while (off < n && (s[off] & 0xC0) == 0x80) ++off;
      }
    }
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// ---------------------------------------------------------------------------------------------
// Split steps (HF tokenizers' Split with its SplitDelimiterBehavior)

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitStep {
  std::unique_ptr<Regex> regex;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
};

struct Span {  // byte offsets [b, e)
  uint32_t b, e;
};

// ---------------------------------------------------------------------------------------------
// Merge table: (left id, right id) -> (rank, merged id), open addressing

class MergeTable {
 public:
  struct Entry {
    uint64_t key = ~0ull;  // ~0: empty slot
    int32_t rank = 0, merged = 0;
  };
  void reserve(size_t count) {
    size_t cap = 16;
    while (cap < 2 * count) cap *= 2;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  // A duplicate pair keeps its first (lowest) rank.
  void insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    Entry& e = slot(key(a, b));
    if (e.key == ~0ull) e = Entry{key(a, b), rank, merged};
  }
  const Entry* find(int32_t a, int32_t b) const {
    const Entry& e = const_cast<MergeTable*>(this)->slot(key(a, b));
    return e.key == ~0ull ? nullptr : &e;
  }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b); }
  Entry& slot(uint64_t k) {  // the slot holding k, or the empty one where it would go
    uint64_t h = (k ^ (k >> 33)) * 0xFF51AFD7ED558CCDull;
    for (uint64_t i = (h ^ (h >> 33)) & mask_;; i = (i + 1) & mask_)
      if (slots_[i].key == k || slots_[i].key == ~0ull) return slots_[i];
  }
  std::vector<Entry> slots_;
  uint64_t mask_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Added tokens and string-keyed maps

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace hf_bpe

// ---------------------------------------------------------------------------------------------
// Implementation state

struct HfBpeTokenizer::Impl {
  std::string source;
  std::vector<std::string> bytes_of;  // id -> raw bytes (added tokens: their content)
  int32_t vocab_size = 0;
  std::array<int32_t, 256> byte_id{};
  hf_bpe::MergeTable merges;
  bool ignore_merges = false;
  hf_bpe::StringMap raw_to_id;  // raw bytes -> vocab id (for ignore_merges)

  std::vector<hf_bpe::AddedToken> added;
  hf_bpe::StringMap added_by_content;
  std::array<bool, 256> added_first{};
  std::vector<int32_t> trie_token{-1};                  // node -> index into added, or -1
  std::unordered_map<uint64_t, int32_t> trie_edges;     // node * 256 + byte -> node

  std::vector<const icu::Normalizer2*> normalizers;
  bool normalize_ascii_only = false;  // some normalizer (NFD, NFKC, NFKD) changes non-ASCII below U+0300
  bool prefix_space = false;
  std::vector<hf_bpe::SplitStep> steps;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, hf_bpe::StringHash, std::equal_to<>> cache;
  mutable std::vector<int32_t> cache_ids;

  void bpe(const unsigned char* p, size_t n, std::vector<int32_t>& out) const;
  void bpe_long(const unsigned char* p, size_t n, std::vector<int32_t>& out) const;
  std::string normalize(std::string_view text) const;
  void encode_section(std::string_view text, std::vector<int32_t>& out, bool use_cache) const;
  void pieces_of(std::string_view text, std::string& view, std::vector<uint32_t>& at,
                 std::vector<hf_bpe::Span>& pieces) const;
  // Longest added token at text[i] (-1: none).
  int32_t match_added(std::string_view text, size_t i, bool allow_special, size_t& len) const;
};

}  // namespace deltafin
