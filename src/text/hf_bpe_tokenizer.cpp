// HfBpeTokenizer: Hugging Face tokenizer.json byte-level BPE (see hf_bpe_tokenizer.hpp).
// Pipeline per encode(): added tokens (byte trie, leftmost-longest) -> normalizer (ICU NFC/NFD/
// NFKC/NFKD, skipped when the text cannot change) -> regex splits (PCRE2, JIT) -> BPE per piece
// with a merge table keyed by symbol-id pairs and a piece cache.
// Regexes: PCRE2 accepts DeepSeek-V3's and Qwen3's verbatim; the one rewrite is \s/\S spelled out
// as Oniguruma's set (hf_pattern_to_pcre2). Known differences from transformers.js, none in the
// test corpus: JS's \s excludes U+0085 and includes U+FEFF (we follow HF tokenizers/Oniguruma), and
// JS spells Qwen's (?i:'s|...) ASCII-only while PCRE2 and HF also take "'ſ" (U+017F).
#include "text/hf_bpe_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <simdjson.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "util/error.hpp"

namespace deltafin {

namespace {

// ---------------------------------------------------------------------------------------------
// Byte-level alphabet (GPT-2 bytes_to_unicode) and UTF-8 helpers

struct ByteAlphabet {
  std::array<uint32_t, 256> cp{};   // byte -> code point
  std::array<int16_t, 324> byte{};  // code point (< 324) -> byte, or -1
  ByteAlphabet() {
    byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      cp[b] = keep ? b : 256 + extra++;
      byte[cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet kAlphabet;

// Length of the valid UTF-8 character at s[i] (1..4), or 0 when the byte starts no valid sequence.
inline size_t utf8_char_len(const unsigned char* s, size_t i, size_t n) {
  const unsigned c = s[i];
  if (c < 0x80) return 1;
  auto cont = [&](size_t k, unsigned lo, unsigned hi) { return i + k < n && s[i + k] >= lo && s[i + k] <= hi; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// Decodes the valid character at s[i] (len from utf8_char_len).
inline uint32_t utf8_decode(const unsigned char* s, size_t i, size_t len) {
  if (len == 1) return s[i];
  uint32_t c = s[i] & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (s[i + k] & 0x3F);
  return c;
}

// Offset of the first byte that starts no valid UTF-8 character, or n.
size_t first_invalid_utf8(const unsigned char* s, size_t n, size_t i = 0) {
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const size_t len = utf8_char_len(s, i, n);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

// The code point at s[i] (0xFFFFFFFF for an invalid byte), its length in len.
inline uint32_t cp_at(const unsigned char* s, size_t i, size_t n, size_t& len) {
  len = utf8_char_len(s, i, n);
  if (!len) return len = 1, 0xFFFFFFFF;
  return utf8_decode(s, i, len);
}
// Start of the character that ends at s[e) (never before b).
inline size_t char_before(const unsigned char* s, size_t b, size_t e) {
  size_t c = e - 1;
  while (c > b && (s[c] & 0xC0) == 0x80 && e - c < 4) --c;
  return utf8_char_len(s, c, e) == e - c ? c : e - 1;
}

// JavaScript's String.prototype.trim whitespace (transformers.js strips lstrip/rstrip neighbours so).
bool is_js_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

// ---------------------------------------------------------------------------------------------
// PCRE2 regex

// tokenizer.json regexes are Oniguruma patterns (HF tokenizers' SysRegex), where \s is
// [\t\n\v\f\r\x85\p{Z}]; PCRE2's UCP \s also takes U+180E (it lists U+180E among \h). So \s
// and \S are spelled out; inside a class \s is expanded and \S kept. Everything else is verbatim.
std::string hf_pattern_to_pcre2(std::string_view pat) {
  static constexpr std::string_view kSpace = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}";
  if (pat.find("\\Q") != std::string_view::npos) return std::string(pat);  // quoting: leave it alone
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pat.size(); ++i) {
    const char c = pat[i];
    if (c == '\\' && i + 1 < pat.size()) {
      const char e = pat[++i];
      if (e == 's') out += in_class ? std::string(kSpace) : "[" + std::string(kSpace) + "]";
      else if (e == 'S' && !in_class) out += "[^" + std::string(kSpace) + "]";
      else out += c, out += e;
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      if (i + 1 < pat.size() && pat[i + 1] == '^') out += pat[++i];
      if (i + 1 < pat.size() && pat[i + 1] == ']') out += pat[++i];  // a leading ] is literal
    } else if (in_class && c == '[' && i + 1 < pat.size() && pat[i + 1] == ':') {
      const size_t end = pat.find(":]", i + 2);  // POSIX class [:name:]
      if (end != std::string_view::npos) out.append(pat.substr(i + 1, end + 1 - i)), i = end + 1;
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

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
  Regex(const std::string& pattern, bool literal, const std::string& where) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const std::string pcre = literal ? pattern : hf_pattern_to_pcre2(pattern);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                          literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("{}: PCRE2 rejects the pattern at offset {}: {}", where, err_off, reinterpret_cast<char*>(msg));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
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

// The GPT-2 pattern ByteLevel applies when use_regex is true (HF tokenizers' byte_level.rs).
const char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitStep {
  std::unique_ptr<Regex> regex;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
};

struct Span {
  uint32_t b, e;
};

// HF tokenizers' Split (pre_tokenizers/split.rs, normalizer.rs split): appends the pieces of
// s[p.b, p.e). Segments alternate between gaps and matches (invert swaps the two kinds).
void apply_split(const SplitStep& step, const unsigned char* s, Span p, std::vector<Span>& out) {
  const size_t first = out.size();
  bool prev_match = false;
  auto segment = [&](uint32_t b, uint32_t e, bool match) {
    match ^= step.invert;
    const bool any = out.size() > first;
    switch (step.behavior) {
      case Behavior::kRemoved:
        if (!match) out.push_back({b, e});
        break;
      case Behavior::kIsolated:
        out.push_back({b, e});
        break;
      case Behavior::kMergedWithPrevious:  // a match joins the gap before it
        if (match && !prev_match && any) out.back().e = e;
        else out.push_back({b, e});
        break;
      case Behavior::kMergedWithNext:  // a gap joins the match before it
        if (!match && prev_match && any) out.back().e = e;
        else out.push_back({b, e});
        break;
      case Behavior::kContiguous:  // runs of one kind become one piece
        if (match == prev_match && any) out.back().e = e;
        else out.push_back({b, e});
        break;
    }
    prev_match = match;
  };
  uint32_t last = p.b;
  step.regex->for_each_match(s + p.b, p.e - p.b, [&](size_t b, size_t e) {
    if (p.b + b > last) segment(last, static_cast<uint32_t>(p.b + b), false);
    segment(static_cast<uint32_t>(p.b + b), static_cast<uint32_t>(p.b + e), true);
    last = static_cast<uint32_t>(p.b + e);
  });
  if (last < p.e) segment(last, p.e, false);
}

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

constexpr size_t kMaxCachedPiece = 256;
constexpr size_t kMaxCacheEntries = 1 << 20;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Implementation state

struct HfBpeTokenizer::Impl {
  std::string source;
  std::vector<std::string> bytes_of;  // id -> raw bytes (added tokens: their content)
  int32_t vocab_size = 0;
  std::array<int32_t, 256> byte_id{};
  MergeTable merges;
  bool ignore_merges = false;
  StringMap raw_to_id;  // raw bytes -> vocab id (for ignore_merges)

  std::vector<AddedToken> added;
  StringMap added_by_content;
  std::array<bool, 256> added_first{};
  std::vector<int32_t> trie_token{-1};                  // node -> index into added, or -1
  std::unordered_map<uint64_t, int32_t> trie_edges;     // node * 256 + byte -> node

  std::vector<const icu::Normalizer2*> normalizers;
  bool normalize_ascii_only = false;  // some normalizer (NFD, NFKC, NFKD) changes non-ASCII below U+0300
  bool prefix_space = false;
  std::vector<SplitStep> steps;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;
  mutable std::vector<int32_t> cache_ids;

  void bpe(const unsigned char* p, size_t n, std::vector<int32_t>& out) const;
  void bpe_long(const unsigned char* p, size_t n, std::vector<int32_t>& out) const;
  std::string normalize(std::string_view text) const;
  void encode_section(std::string_view text, std::vector<int32_t>& out, bool use_cache) const;
  void pieces_of(std::string_view text, std::string& view, std::vector<uint32_t>& at,
                 std::vector<Span>& pieces) const;
  // Longest added token at text[i] (-1: none).
  int32_t match_added(std::string_view text, size_t i, bool allow_special, size_t& len) const;
};

// BPE of one piece: lowest merge rank first, leftmost among equal ranks (transformers.js' queue
// orders by rank + position; HF tokenizers' by (rank, position)). Short pieces scan for the
// minimum; long ones use a heap.
void HfBpeTokenizer::Impl::bpe(const unsigned char* p, size_t n, std::vector<int32_t>& out) const {
  if (n == 1) {
    out.push_back(byte_id[p[0]]);
    return;
  }
  if (ignore_merges) {
    auto it = raw_to_id.find(std::string_view(reinterpret_cast<const char*>(p), n));
    if (it != raw_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (n > 64) return bpe_long(p, n, out);
  int32_t id[64], rank[64], merged[64];
  int8_t next[64];
  constexpr int32_t kNone = INT32_MAX;
  for (size_t i = 0; i < n; ++i) id[i] = byte_id[p[i]], next[i] = static_cast<int8_t>(i + 1);
  next[n - 1] = -1;
  auto rate = [&](int i) {
    const int j = next[i];
    const MergeTable::Entry* e = j < 0 ? nullptr : merges.find(id[i], id[j]);
    rank[i] = e ? e->rank : kNone;
    merged[i] = e ? e->merged : -1;
  };
  for (size_t i = 0; i < n; ++i) rate(static_cast<int>(i));
  for (;;) {
    int best = -1, prev_of_best = -1, prev = -1;
    int32_t best_rank = kNone;
    for (int i = 0; i >= 0; prev = i, i = next[i])
      if (rank[i] < best_rank) best_rank = rank[i], best = i, prev_of_best = prev;
    if (best < 0) break;
    id[best] = merged[best];
    next[best] = next[next[best]];
    rate(best);
    if (prev_of_best >= 0) rate(prev_of_best);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

void HfBpeTokenizer::Impl::bpe_long(const unsigned char* p, size_t n, std::vector<int32_t>& out) const {
  std::vector<int32_t> id(n), prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_id[p[i]];
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeTable::Entry* e = merges.find(id[i], id[next[i]])) heap.push({e->rank, i, id[i], id[next[i]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t j = next[c.pos];
    // Stale entries: a node's id only changes by growing, so matching ids mean the pair is current.
    if (id[c.pos] != c.left || j < 0 || id[j] != c.right) continue;
    id[c.pos] = merges.find(c.left, c.right)->merged;
    id[j] = -1;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

std::string HfBpeTokenizer::Impl::normalize(std::string_view text) const {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned char limit = normalize_ascii_only ? 0x80 : 0xCC;  // below U+0300 NFC changes nothing
  if (normalizers.empty() || std::all_of(s, s + n, [&](unsigned char c) { return c < limit; }))
    return std::string(text);
  std::string out;
  out.reserve(n + n / 4);
  for (size_t i = 0; i < n;) {
    const size_t bad = first_invalid_utf8(s, n, i);
    if (bad > i) {  // a valid run; invalid bytes in between are copied unchanged
      icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data() + i, bad - i));
      for (const icu::Normalizer2* norm : normalizers) {
        UErrorCode status = U_ZERO_ERROR;
        icu::UnicodeString v = norm->normalize(u, status);
        if (U_FAILURE(status)) fail("{}: ICU normalization failed ({})", source, u_errorName(status));
        u = std::move(v);
      }
      u.toUTF8String(out);
    }
    if (bad < n) out += text[bad];
    i = bad + 1;
  }
  return out;
}

// Splits one (normalized) section into pieces. `view` receives the text the regexes see: the
// section itself, or (with invalid UTF-8) a copy where each invalid byte is U+E000; `at` maps view
// offsets back to section offsets (empty when the view is the section).
void HfBpeTokenizer::Impl::pieces_of(std::string_view text, std::string& view, std::vector<uint32_t>& at,
                                     std::vector<Span>& pieces) const {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  at.clear();
  view.clear();
  const unsigned char* v = s;
  size_t vn = n;
  if (first_invalid_utf8(s, n) < n) {
    view.reserve(n + 16);
    at.reserve(n + 16);
    for (size_t i = 0; i < n;) {
      const size_t len = utf8_char_len(s, i, n);
      if (len) {
        view.append(text.data() + i, len);
        for (size_t k = 0; k < len; ++k) at.push_back(static_cast<uint32_t>(i + k));
        i += len;
      } else {
        view += "\xEE\x80\x80";
        at.insert(at.end(), 3, static_cast<uint32_t>(i));
        ++i;
      }
    }
    at.push_back(static_cast<uint32_t>(n));
    v = reinterpret_cast<const unsigned char*>(view.data());
    vn = view.size();
  }
  pieces.assign(1, Span{0, static_cast<uint32_t>(vn)});
  std::vector<Span> next;
  for (const SplitStep& step : steps) {
    next.clear();
    for (const Span& p : pieces) apply_split(step, v, p, next);
    pieces.swap(next);
  }
  if (!at.empty())
    for (Span& p : pieces) p = Span{at[p.b], at[p.e]};
}

void HfBpeTokenizer::Impl::encode_section(std::string_view text, std::vector<int32_t>& out,
                                          bool use_cache) const {
  std::string normalized;
  if (!normalizers.empty()) {
    normalized = normalize(text);
    text = normalized;
  }
  if (text.empty()) return;
  if (prefix_space && text[0] != ' ') {
    normalized = " " + std::string(text);
    text = normalized;
  }
  std::string view;
  std::vector<uint32_t> at;
  std::vector<Span> pieces;
  pieces_of(text, view, at, pieces);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (const Span& p : pieces) {
    const size_t n = p.e - p.b;
    if (n == 0) continue;
    if (!use_cache || n > kMaxCachedPiece) {
      bpe(s + p.b, n, out);
      continue;
    }
    const std::string_view key(text.data() + p.b, n);
    auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), cache_ids.begin() + it->second.first,
                 cache_ids.begin() + it->second.first + it->second.second);
      continue;
    }
    const size_t before = out.size();
    bpe(s + p.b, n, out);
    if (cache.size() >= kMaxCacheEntries) cache.clear(), cache_ids.clear();
    const auto off = static_cast<uint32_t>(cache_ids.size());
    cache_ids.insert(cache_ids.end(), out.begin() + before, out.end());
    cache.emplace(std::string(key), std::make_pair(off, static_cast<uint32_t>(out.size() - before)));
  }
}

int32_t HfBpeTokenizer::Impl::match_added(std::string_view text, size_t i, bool allow_special, size_t& len) const {
  int32_t node = 0, found = -1;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t j = i; j < text.size(); ++j) {
    auto it = trie_edges.find(static_cast<uint64_t>(node) * 256 + s[j]);
    if (it == trie_edges.end()) break;
    node = it->second;
    const int32_t t = trie_token[node];
    if (t < 0 || (added[t].special && !allow_special)) continue;
    if (added[t].single_word) {  // HF: no word character right before or after the token
      auto is_word = [&](size_t k) {
        size_t l;
        const uint32_t c = cp_at(s, k, text.size(), l);
        return c == '_' || (c != 0xFFFFFFFF && u_isalnum(static_cast<UChar32>(c)));
      };
      if ((i > 0 && is_word(char_before(s, 0, i))) || (j + 1 < text.size() && is_word(j + 1))) continue;
    }
    found = t;
    len = j + 1 - i;
  }
  return found;
}

// ---------------------------------------------------------------------------------------------
// Public interface

HfBpeTokenizer::HfBpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfBpeTokenizer::~HfBpeTokenizer() = default;

std::vector<int32_t> HfBpeTokenizer::encode(std::string_view text, bool allow_special) const {
  const Impl& m = *impl_;
  // Sections: text between added tokens (kind -1) or an added token (its index in m.added).
  struct Section {
    size_t b, e;
    int32_t added;
  };
  std::vector<Section> sections;
  size_t start = 0;
  if (!m.added.empty()) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
      size_t len = 0;
      const int32_t t = m.added_first[s[i]] ? m.match_added(text, i, allow_special, len) : -1;
      if (t < 0) {
        ++i;
        continue;
      }
      if (i > start) sections.push_back({start, i, -1});
      sections.push_back({i, i + len, t});
      i += len;
      start = i;
    }
  }
  if (start < text.size() || sections.empty()) sections.push_back({start, text.size(), -1});

  // lstrip / rstrip: whitespace next to such a token is dropped (transformers.js trims the
  // neighbouring sections; HF tokenizers lets the token's match absorb it).
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t k = 0; k < sections.size(); ++k) {
    if (sections[k].added < 0) continue;
    const AddedToken& t = m.added[sections[k].added];
    size_t l;
    if (t.lstrip && k > 0 && sections[k - 1].added < 0)
      for (Section& p = sections[k - 1]; p.e > p.b && is_js_space(cp_at(s, char_before(s, p.b, p.e), p.e, l));)
        p.e -= l;
    if (t.rstrip && k + 1 < sections.size() && sections[k + 1].added < 0)
      for (Section& q = sections[k + 1]; q.b < q.e && is_js_space(cp_at(s, q.b, q.e, l));) q.b += l;
  }

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::unique_lock<std::mutex> lock(m.cache_mutex, std::try_to_lock);  // busy: encode uncached
  for (const Section& sec : sections) {
    if (sec.added >= 0) {
      out.push_back(m.added[sec.added].id);
    } else if (sec.e > sec.b) {
      m.encode_section(text.substr(sec.b, sec.e - sec.b), out, lock.owns_lock());
    }
  }
  return out;
}

std::string HfBpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(impl_->bytes_of.size())) return {};
  return impl_->bytes_of[id];
}

std::optional<int32_t> HfBpeTokenizer::special_id(std::string_view text) const {
  auto it = impl_->added_by_content.find(text);
  if (it == impl_->added_by_content.end()) return std::nullopt;
  return it->second;
}

int32_t HfBpeTokenizer::vocab_size() const { return impl_->vocab_size; }

std::string HfBpeTokenizer::normalize(std::string_view text) const { return impl_->normalize(text); }

std::vector<std::string> HfBpeTokenizer::pre_tokenize(std::string_view text) const {
  std::string buf;
  if (impl_->prefix_space && !text.empty() && text[0] != ' ') {
    buf = " " + std::string(text);
    text = buf;
  }
  std::string view;
  std::vector<uint32_t> at;
  std::vector<Span> pieces;
  impl_->pieces_of(text, view, at, pieces);
  std::vector<std::string> out;
  for (const Span& p : pieces) out.emplace_back(text.substr(p.b, p.e - p.b));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Loading tokenizer.json

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

struct Loader {
  const std::string& path;
  HfBpeTokenizer::Impl& m;
  bool saw_byte_level = false;

  template <typename E>  // element or simdjson_result<element>
  std::string_view str(E e, const std::string& field) const {
    std::string_view v;
    if (e.get(v)) fail("{}: {} is not a string", path, field);
    return v;
  }
  bool flag(object o, const char* key, const std::string& field, bool fallback = false) const {
    element e;
    if (o[key].get(e) || e.is_null()) return fallback;
    bool v;
    if (e.get(v)) fail("{}: {}.{} is not a boolean", path, field, key);
    return v;
  }
  std::string type_of(element e, const std::string& field) const {
    object o;
    if (e.get(o)) fail("{}: {} is not an object", path, field);
    element t;
    if (o["type"].get(t)) fail("{}: {} has no \"type\"", path, field);
    return std::string(str(t, field + ".type"));
  }

  void normalizer(element e, const std::string& field) {
    if (e.is_null()) return;
    const std::string type = type_of(e, field);
    if (type == "Sequence") {
      array list;
      if (e["normalizers"].get(list)) fail("{}: {}.normalizers is not an array", path, field);
      size_t i = 0;
      for (element x : list) normalizer(x, fmt::format("{}.normalizers[{}]", field, i++));
      return;
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* norm = type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                   : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                   : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                   : type == "NFKD" ? icu::Normalizer2::getNFKDInstance(status)
                                                    : nullptr;
    if (!norm && U_SUCCESS(status))
      fail("{}: {}.type \"{}\" is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)", path, field, type);
    if (U_FAILURE(status)) fail("{}: {}: ICU {} normalizer unavailable ({})", path, field, type, u_errorName(status));
    m.normalizers.push_back(norm);
    if (type != "NFC") m.normalize_ascii_only = true;
  }

  void add_split(const std::string& pattern, bool literal, Behavior behavior, bool invert, const std::string& field) {
    SplitStep step;
    step.regex = std::make_unique<Regex>(pattern, literal, path + ": " + field);
    step.behavior = behavior;
    step.invert = invert;
    m.steps.push_back(std::move(step));
  }

  void pre_tokenizer(element e, const std::string& field) {
    if (e.is_null()) return;
    const std::string type = type_of(e, field);
    object o;
    if (e.get(o)) fail("{}: {} is not an object", path, field);
    if (type == "Sequence") {
      array list;
      if (e["pretokenizers"].get(list)) fail("{}: {}.pretokenizers is not an array", path, field);
      size_t i = 0;
      for (element x : list) pre_tokenizer(x, fmt::format("{}.pretokenizers[{}]", field, i++));
    } else if (type == "Split") {
      element pat;
      if (e["pattern"].get(pat)) fail("{}: {}.pattern is missing", path, field);
      element v;
      bool literal;
      if (!pat["Regex"].get(v)) literal = false;
      else if (!pat["String"].get(v)) literal = true;
      else fail("{}: {}.pattern has neither \"Regex\" nor \"String\"", path, field);
      const std::string pattern(str(v, field + ".pattern"));
      const std::string behavior(str(e["behavior"], field + ".behavior"));
      const Behavior b = behavior == "Removed"              ? Behavior::kRemoved
                         : behavior == "Isolated"           ? Behavior::kIsolated
                         : behavior == "MergedWithPrevious" ? Behavior::kMergedWithPrevious
                         : behavior == "MergedWithNext"     ? Behavior::kMergedWithNext
                         : behavior == "Contiguous"         ? Behavior::kContiguous
                                                            : (fail("{}: {}.behavior \"{}\" is not supported",
                                                                    path, field, behavior), Behavior::kRemoved);
      add_split(pattern, literal, b, flag(o, "invert", field), field + ".pattern");
    } else if (type == "ByteLevel") {
      saw_byte_level = true;
      if (flag(o, "add_prefix_space", field)) {
        if (!m.steps.empty())
          fail("{}: {}.add_prefix_space is supported only on the first pre-tokenizer", path, field);
        m.prefix_space = true;
      }
      if (flag(o, "use_regex", field, true))
        add_split(kGpt2Pattern, false, Behavior::kIsolated, false, field + " (GPT-2 pattern)");
    } else if (type == "Digits") {
      add_split("\\p{N}", false, flag(o, "individual_digits", field) ? Behavior::kIsolated
                                                                                  : Behavior::kContiguous,
                false, field);
    } else {
      fail("{}: {}.type \"{}\" is not supported (supported: Sequence, Split, ByteLevel, Digits)", path, field, type);
    }
  }

  // A vocab string in the byte-level alphabet -> raw bytes; false if some character is outside it.
  static bool to_raw(std::string_view t, std::string& raw) {
    raw.clear();
    const auto* s = reinterpret_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.size();) {
      const size_t l = utf8_char_len(s, i, t.size());
      if (!l) return false;
      const uint32_t c = utf8_decode(s, i, l);
      if (c >= kAlphabet.byte.size() || kAlphabet.byte[c] < 0) return false;
      raw += static_cast<char>(kAlphabet.byte[c]);
      i += l;
    }
    return true;
  }

  void model(element e) {
    object mo;
    if (e.get(mo)) fail("{}: model is missing or not an object", path);
    element t;
    std::string type = mo["type"].get(t) ? std::string("BPE") : std::string(str(t, "model.type"));
    if (type != "BPE") fail("{}: model.type is \"{}\"; only BPE is supported", path, type);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      element v;
      std::string_view sv;
      if (!mo[key].get(v) && !v.is_null() && (v.get(sv) || !sv.empty()))
        fail("{}: model.{} is not supported by the byte-level BPE", path, key);
    }
    element dropout;
    double d = 0;
    if (!mo["dropout"].get(dropout) && !dropout.is_null() && (dropout.get(d) || d != 0.0))
      fail("{}: model.dropout is not supported", path);
    m.ignore_merges = flag(mo, "ignore_merges", "model");

    object vocab;
    if (mo["vocab"].get(vocab)) fail("{}: model.vocab is missing or not an object", path);
    std::unordered_map<std::string_view, int32_t> by_string;
    by_string.reserve(vocab.size());
    std::string raw;
    for (auto [key, value] : vocab) {
      int64_t id;
      if (value.get(id) || id < 0 || id > INT32_MAX / 2) fail("{}: model.vocab[\"{}\"] is not a valid id", path, key);
      by_string.emplace(key, static_cast<int32_t>(id));
      if (id >= static_cast<int64_t>(m.bytes_of.size())) m.bytes_of.resize(id + 1);
      m.bytes_of[id] = to_raw(key, raw) ? raw : std::string(key);  // other tokens: their UTF-8 text
      if (m.ignore_merges && to_raw(key, raw)) m.raw_to_id.emplace(raw, static_cast<int32_t>(id));
    }
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = kAlphabet.cp[b];  // < 324: one or two UTF-8 bytes
      const std::string sym = c < 0x80 ? std::string(1, static_cast<char>(c))
                                       : std::string{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
      auto it = by_string.find(sym);
      if (it == by_string.end()) fail("{}: model.vocab lacks the byte-level symbol \"{}\" (byte 0x{:02x})", path, sym, b);
      m.byte_id[b] = it->second;
    }

    array merges;
    if (mo["merges"].get(merges)) fail("{}: model.merges is missing or not an array", path);
    m.merges.reserve(merges.size());
    int32_t rank = 0;
    for (element x : merges) {
      const std::string field = fmt::format("model.merges[{}]", rank);
      std::string_view a, b;
      std::string_view whole;
      array pair;
      if (!x.get(whole)) {
        const size_t sp = whole.find(' ');
        if (sp == std::string_view::npos) fail("{}: {} \"{}\" is not \"left right\"", path, field, whole);
        a = whole.substr(0, sp);
        b = whole.substr(sp + 1);
      } else if (!x.get(pair) && pair.size() == 2) {
        a = str(pair.at(0), field);
        b = str(pair.at(1), field);
      } else {
        fail("{}: {} is neither \"left right\" nor [left, right]", path, field);
      }
      auto ia = by_string.find(a), ib = by_string.find(b);
      if (ia == by_string.end()) fail("{}: {} names unknown token \"{}\"", path, field, a);
      if (ib == by_string.end()) fail("{}: {} names unknown token \"{}\"", path, field, b);
      std::string joined = std::string(a) + std::string(b);
      auto ij = by_string.find(joined);
      if (ij == by_string.end()) fail("{}: {} makes \"{}\", which is not in model.vocab", path, field, joined);
      m.merges.insert(ia->second, ib->second, rank, ij->second);
      ++rank;
    }
  }

  void added_tokens(element e) {
    if (e.is_null()) return;
    array list;
    if (e.get(list)) fail("{}: added_tokens is not an array", path);
    size_t i = 0;
    for (element x : list) {
      const std::string field = fmt::format("added_tokens[{}]", i++);
      object o;
      if (x.get(o)) fail("{}: {} is not an object", path, field);
      AddedToken t;
      t.content = std::string(str(o["content"], field + ".content"));
      int64_t id;
      if (o["id"].get(id) || id < 0 || id > INT32_MAX / 2) fail("{}: {}.id is not a valid id", path, field);
      if (t.content.empty()) fail("{}: {}.content is empty", path, field);
      t.id = static_cast<int32_t>(id);
      t.special = flag(o, "special", field);
      t.lstrip = flag(o, "lstrip", field);
      t.rstrip = flag(o, "rstrip", field);
      t.single_word = flag(o, "single_word", field);
      if (t.id >= static_cast<int32_t>(m.bytes_of.size())) m.bytes_of.resize(t.id + 1);
      m.bytes_of[t.id] = t.content;
      if (!m.added_by_content.emplace(t.content, t.id).second) continue;  // first one wins
      const auto index = static_cast<int32_t>(m.added.size());
      int32_t node = 0;
      for (unsigned char c : t.content) {
        auto [it, inserted] = m.trie_edges.emplace(static_cast<uint64_t>(node) * 256 + c, 0);
        if (inserted) {
          it->second = static_cast<int32_t>(m.trie_token.size());
          m.trie_token.push_back(-1);
        }
        node = it->second;
      }
      m.trie_token[node] = index;
      m.added_first[static_cast<unsigned char>(t.content[0])] = true;
      m.added.push_back(std::move(t));
    }
  }
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path) {
  const std::string& path = tokenizer_json_path;
  simdjson::dom::parser parser;
  simdjson::padded_string json;
  if (auto err = simdjson::padded_string::load(path).get(json))
    fail("{}: cannot read tokenizer.json ({})", path, simdjson::error_message(err));
  element root;
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", path, simdjson::error_message(err));
  if (!root.is_object()) fail("{}: not a tokenizer.json (top level is not an object)", path);

  auto impl = std::make_unique<HfBpeTokenizer::Impl>();
  impl->source = path;
  Loader loader{path, *impl};
  element e;
  if (root["model"].get(e)) fail("{}: model is missing", path);
  loader.model(e);
  if (!root["normalizer"].get(e)) loader.normalizer(e, "normalizer");
  if (!root["pre_tokenizer"].get(e)) loader.pre_tokenizer(e, "pre_tokenizer");
  if (!root["added_tokens"].get(e)) loader.added_tokens(e);
  if (!loader.saw_byte_level) {
    element d;
    std::string_view dt;
    if (root["decoder"].get(d) || d.is_null() || d["type"].get(dt) || dt != "ByteLevel")
      fail("{}: pre_tokenizer and decoder: not a byte-level BPE (no ByteLevel step)", path);
  }
  impl->vocab_size = static_cast<int32_t>(impl->bytes_of.size());
  return std::make_unique<HfBpeTokenizer>(std::move(impl));
}

}  // namespace deltafin
