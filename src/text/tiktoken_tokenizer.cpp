// The tiktoken tokenizer: ranks file loading, the PCRE2 piece splitter (with invalid-UTF-8
// handling), tiktoken's byte-pair merge, special-token splitting, and Kimi's model-dir loader.
#include "text/tiktoken_tokenizer.hpp"

#include "text/utf8.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <queue>
#include <tuple>

namespace deltafin {

const char kO200kPatStr[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char kKimiPatStr[] =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

std::string tiktoken_pattern_to_pcre2(std::string_view pat) {
  // Pass 1: [X&&[^Y]] -> (?:(?![Y])[X]). X and Y hold no nested classes in the patterns we use.
  std::string out;
  size_t i = 0;
  while (i < pat.size()) {
    if (pat[i] == '\\' && i + 1 < pat.size()) {
      out.append(pat.substr(i, 2));
      i += 2;
      continue;
    }
    if (pat[i] != '[') {
      out += pat[i++];
      continue;
    }
    // A class: find its end and any top-level "&&[^...]" inside it.
    size_t j = i + 1;
    if (j < pat.size() && pat[j] == '^') ++j;
    if (j < pat.size() && pat[j] == ']') ++j;  // a leading ']' is literal
    size_t amp = std::string_view::npos;
    while (j < pat.size() && pat[j] != ']') {
      if (pat[j] == '\\') {
        j += 2;
      } else if (pat[j] == '&' && j + 1 < pat.size() && pat[j + 1] == '&' && amp == std::string_view::npos) {
        amp = j;
        // skip the nested [^...] operand
        size_t k = pat.find(']', j + 2);
        while (k != std::string_view::npos && pat[k - 1] == '\\') k = pat.find(']', k + 1);
        if (k == std::string_view::npos) fail("split pattern: unterminated class intersection at offset {}", j);
        j = k + 1;
      } else {
        ++j;
      }
    }
    if (j >= pat.size()) fail("split pattern: unterminated character class at offset {}", i);
    if (amp == std::string_view::npos) {
      out.append(pat.substr(i, j + 1 - i));
    } else {
      std::string_view x = pat.substr(i + 1, amp - (i + 1));
      std::string_view rhs = pat.substr(amp + 2, j - (amp + 2));  // "[^Y]"
      if (rhs.size() < 3 || rhs.substr(0, 2) != "[^" || rhs.back() != ']' || x.empty() || x[0] == '^')
        fail("split pattern: unsupported class intersection '{}'", pat.substr(i, j + 1 - i));
      out += "(?:(?![";
      out.append(rhs.substr(2, rhs.size() - 3));
      out += "])[";
      out.append(x);
      out += "])";
    }
    i = j + 1;
  }
  // Pass 2: bare \p{Han} is Script in Rust/Python regex; PCRE2 >= 10.40 reads it as scx.
  std::string res;
  const std::string_view han = "\\p{Han}";
  for (size_t k = 0; k < out.size();) {
    if (out.compare(k, han.size(), han) == 0 && (k == 0 || out[k - 1] != '\\')) {
      res += "\\p{sc:Han}";
      k += han.size();
    } else {
      res += out[k++];
    }
  }
  return res;
}

std::string o200k_split_pattern() { return tiktoken_pattern_to_pcre2(kO200kPatStr); }
std::string kimi_split_pattern() { return tiktoken_pattern_to_pcre2(kKimiPatStr); }

// ---------------------------------------------------------------------------------------------
// Token hashing, per-thread PCRE2 match data

namespace {

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
  }
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(16, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// ASCII fast path for the two tiktoken patterns (o200k_base's and Kimi's). At a given offset it
// returns the end of the match PCRE2 would find, or 0 ("ask PCRE2") whenever any character it has
// to look at is not ASCII. On ASCII the two patterns nearly agree (no Han, no marks, no
// non-ASCII letters or digits): only the tail of (4) differs, [\r\n/]* in o200k, [\r\n]* in Kimi's.
// Alternatives, in order: (1) P?U*L+C? (2) P?U+L*C? (3) N{1,3} (4) ' '?O+[\r\n/]* (5) \s*[\r\n]+
// (6) \s+(?!\S) (7) \s+, with P = [^\r\n\p{L}\p{N}], U = upper, L = lower, O = [^\s\p{L}\p{N}],
// C = a contraction ('s 't 're 've 'm 'll 'd, any case).

namespace {

enum AsciiClass : uint8_t { kOther, kUpper, kLower, kDigit, kBlank /* \t \v \f ' ' */, kNewline /* \r \n */ };

constexpr auto kAscii = [] {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    t[c] = c >= 'A' && c <= 'Z'   ? kUpper
           : c >= 'a' && c <= 'z' ? kLower
           : c >= '0' && c <= '9' ? kDigit
           : c == '\r' || c == '\n'               ? kNewline
           : c == ' ' || (c >= '\t' && c <= '\f') ? kBlank
                                                  : kOther;
  }
  return t;
}();

constexpr int kEnd = -1, kWide = -2;  // end of text; a non-ASCII byte

inline size_t ascii_match(const unsigned char* s, size_t n, size_t off, bool slash_tail) {
  auto cls = [&](size_t i) -> int { return i >= n ? kEnd : s[i] >= 0x80 ? kWide : kAscii[s[i]]; };
  const int c0 = cls(off);
  if (c0 == kWide) return 0;
  // (1), (2): the optional prefix applies to blanks and others; letters start without it.
  if (c0 == kOther || c0 == kBlank || c0 == kUpper || c0 == kLower) {
    size_t i = (c0 == kOther || c0 == kBlank) ? off + 1 : off;
    size_t j = i;
    while (cls(j) == kUpper) ++j;
    while (cls(j) == kLower) ++j;
    if (cls(j) == kWide) return 0;
    if (j > i) {  // (1) when lowers follow the uppers, else (2): U+ and no lowers
      if (cls(j) == kOther && s[j] == '\'') {
        const int c1 = cls(j + 1);
        if (c1 == kWide) return 0;  // Kimi's (?i:'s) also takes "'ſ"
        const int l1 = c1 >= 0 ? (s[j + 1] | 0x20) : 0;
        if (l1 == 's' || l1 == 't' || l1 == 'm' || l1 == 'd') return j + 2;
        if (l1 == 'r' || l1 == 'v' || l1 == 'l') {
          const int c2 = cls(j + 2);
          if (c2 == kWide) return 0;
          const int l2 = c2 >= 0 ? (s[j + 2] | 0x20) : 0;
          if ((l1 == 'l' && l2 == 'l') || (l1 != 'l' && l2 == 'e')) return j + 3;
        }
      }
            return j;
    }
  }
  // (3)
  if (c0 == kDigit) {
    size_t j = off + 1;
    while (j < off + 3 && cls(j) == kDigit) ++j;
    if (j < off + 3 && cls(j) == kWide) return 0;
    return j;
  }
  // (4)
  size_t start = std::string::npos;
  if (c0 == kOther) {
    start = off;
  } else if (s[off] == ' ') {
    const int c1 = cls(off + 1);
    if (c1 == kWide) return 0;
    if (c1 == kOther) start = off + 1;
  }
  if (start != std::string::npos) {
    size_t j = start;
    while (cls(j) == kOther) ++j;
    if (cls(j) == kWide) return 0;
    while (j < n && (s[j] == '\r' || s[j] == '\n' || (slash_tail && s[j] == '/'))) ++j;  // never non-ASCII
    return j;
  }
  // (5), (6), (7): a whitespace run
  size_t w = off, last_nl = std::string::npos;
  for (int c; (c = cls(w)) == kBlank || c == kNewline; ++w)
    if (c == kNewline) last_nl = w;
  if (cls(w) == kWide) return 0;  // U+00A0, U+0085, U+2028 ... are \s too
  if (last_nl != std::string::npos) return last_nl + 1;
  if (w == n || w - off == 1) return w;
  return w - 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The piece splitter

class PieceSplitter {
 public:
  PieceSplitter(const std::string& pattern, const std::string& source) {
    slash_tail_ = pattern == o200k_split_pattern();
    ascii_fast_ = slash_tail_ || pattern == kimi_split_pattern();
    int err = 0;
    PCRE2_SIZE err_off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &err, &err_off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("{}: split pattern does not compile at offset {}: {}", source, err_off, reinterpret_cast<char*>(msg));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~PieceSplitter() { pcre2_code_free(code_); }
  PieceSplitter(const PieceSplitter&) = delete;
  PieceSplitter& operator=(const PieceSplitter&) = delete;

  // Calls fn(begin, end) for consecutive pieces covering all of text (byte offsets). fast = false
  // runs PCRE2 alone (tests compare the two).
  template <typename Fn>
  void split(std::string_view text, Fn&& fn, bool fast = true) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    if (utf8::first_invalid(s, n) == n) {
      split_valid(s, n, fn, fast);
      return;
    }
    // Rare path: each invalid byte becomes U+E000 (category Co) in a transcoded copy; piece
    // boundaries map back through `at` (transcoded offset -> original offset).
    std::string buf;
    std::vector<uint32_t> at;
    utf8::replace_invalid(s, n, buf, at);
    split_valid(reinterpret_cast<const unsigned char*>(buf.data()), buf.size(),
                [&](size_t b, size_t e) { fn(at[b], at[e]); }, fast);
  }

 private:
  template <typename Fn>
  void split_valid(const unsigned char* s, size_t n, Fn&& fn, bool fast) const {
    static thread_local MatchData tl;
    pcre2_match_data* md = tl.md;
    pcre2_match_context* mctx = nullptr;
    pcre2_jit_stack* stack = nullptr;
    size_t off = 0;
    while (off < n) {
      if (fast && ascii_fast_) {
        const size_t e = ascii_match(s, n, off, slash_tail_);
        if (e) {
          fn(off, e);
          off = e;
          continue;
        }
      }
      int rc = jit_ ? pcre2_jit_match(code_, s, n, off, 0, md, mctx)
                    : pcre2_match(code_, s, n, off, PCRE2_NO_UTF_CHECK, md, mctx);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {  // a very long run: give JIT a big stack
        mctx = pcre2_match_context_create(nullptr);
        stack = pcre2_jit_stack_create(1 << 20, 1 << 30, nullptr);
        pcre2_jit_stack_assign(mctx, nullptr, stack);
        continue;
      }
      if (rc == PCRE2_ERROR_NOMATCH) {
        fn(off, n);  // cannot happen with the tiktoken patterns (every character matches)
        break;
      }
      if (rc < 0) {
        if (stack) pcre2_jit_stack_free(stack), pcre2_match_context_free(mctx);
        fail("tiktoken: split pattern failed on the text (PCRE2 error {})", rc);
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t b = ov[0], e = ov[1];
      if (b > off) fn(off, b);
      if (e == b) {  // empty match (not possible with these patterns): take one character
        e = b + 1;
        while (e < n && (s[e] & 0xC0) == 0x80) ++e;
      }
      fn(b, e);
      off = e;
    }
    if (stack) {
      pcre2_jit_stack_free(stack);
      pcre2_match_context_free(mctx);
    }
  }

  pcre2_code* code_ = nullptr;
  bool jit_ = false;
  bool ascii_fast_ = false;  // the pattern is one that ascii_match() knows
  bool slash_tail_ = false;  // o200k's (4) ends in [\r\n/]*, Kimi's in [\r\n]*
};

// ---------------------------------------------------------------------------------------------
// The tokenizer

TiktokenTokenizer::TiktokenTokenizer(std::vector<std::string> tokens, const std::string& pcre2_pattern,
                                     SpecialTokens specials, const std::string& source) {
  size_t total = 0, count = 0;
  for (const auto& t : tokens) total += t.size(), count += !t.empty();
  if (total >= std::numeric_limits<uint32_t>::max()) fail("{}: vocabulary too large", source);
  bytes_.reserve(total);
  offsets_.reserve(tokens.size() + 1);
  for (const auto& t : tokens) {
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
    bytes_ += t;
  }
  offsets_.push_back(static_cast<uint32_t>(bytes_.size()));

  size_t cap = 16;
  while (cap < 2 * count) cap *= 2;
  slots_.assign(cap, Slot{0, -1});
  mask_ = cap - 1;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::string& t = tokens[r];
    if (t.empty()) continue;
    const uint64_t h = hash_bytes(t.data(), t.size());
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = Slot{tag, static_cast<int32_t>(r)};
        break;
      }
      if (slot.tag == tag && token_bytes(slot.id) == t)
        fail("{}: ranks {} and {} have the same bytes", source, slot.id, r);
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (rank_of(&c, 1) < 0) fail("{}: the single byte 0x{:02x} is not a token", source, b);
  }

  vocab_size_ = num_base_tokens();
  for (const auto& [text, id] : specials) {
    if (text.empty()) fail("{}: empty special token text (id {})", source, id);
    if (id < 0) fail("{}: special token '{}' has negative id {}", source, text, id);
    if (id < num_base_tokens() && offsets_[id + 1] > offsets_[id])
      fail("{}: special token '{}' has id {}, which is a base token", source, text, id);
    if (!special_text_.emplace(id, text).second) fail("{}: special id {} given twice", source, id);
    vocab_size_ = std::max(vocab_size_, id + 1);
  }
  specials_ = std::move(specials);
  std::sort(specials_.begin(), specials_.end(), [](const auto& a, const auto& b) {
    if (a.first[0] != b.first[0]) return a.first[0] < b.first[0];
    if (a.first.size() != b.first.size()) return a.first.size() > b.first.size();
    return a.first < b.first;
  });
  for (size_t i = 0; i < specials_.size(); ++i) {
    if (i > 0 && specials_[i].first == specials_[i - 1].first)
      fail("{}: special token '{}' given twice", source, specials_[i].first);
    const auto b = static_cast<unsigned char>(specials_[i].first[0]);
    special_first_[b].push_back(static_cast<uint16_t>(i));
    special_start_[b] = true;
  }
  if (specials_.size() > 65535) fail("{}: too many special tokens", source);
  splitter_ = std::make_unique<PieceSplitter>(pcre2_pattern, source);
}

TiktokenTokenizer::~TiktokenTokenizer() = default;

inline int32_t TiktokenTokenizer::rank_of(const char* p, size_t n) const {
  const uint64_t h = hash_bytes(p, n);
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot slot = slots_[i];
    if (slot.id < 0) return -1;
    if (slot.tag == tag) {
      const uint32_t b = offsets_[slot.id], e = offsets_[slot.id + 1];
      if (e - b == n && std::memcmp(bytes_.data() + b, p, n) == 0) return slot.id;
    }
  }
}

std::string TiktokenTokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && id < num_base_tokens()) return bytes_.substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  auto it = special_text_.find(id);
  return it == special_text_.end() ? std::string() : it->second;
}

std::optional<int32_t> TiktokenTokenizer::special_id(std::string_view text) const {
  for (const auto& [t, id] : specials_)
    if (t == text) return id;
  return std::nullopt;
}

size_t TiktokenTokenizer::find_special(std::string_view text, size_t from, int32_t& id, size_t& len) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto b = static_cast<unsigned char>(text[pos]);
    if (!special_start_[b]) continue;
    for (uint16_t idx : special_first_[b]) {  // longest first
      const std::string& t = specials_[idx].first;
      if (text.size() - pos >= t.size() && std::memcmp(text.data() + pos, t.data(), t.size()) == 0) {
        id = specials_[idx].second;
        len = t.size();
        return pos;
      }
    }
  }
  return std::string_view::npos;
}

std::vector<int32_t> TiktokenTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 4);
  if (!allow_special || specials_.empty()) {
    encode_ordinary(text, out);
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    int32_t id = -1;
    size_t len = 0;
    const size_t at = find_special(text, start, id, len);
    if (at == std::string_view::npos) {
      encode_ordinary(text.substr(start), out);
      break;
    }
    encode_ordinary(text.substr(start, at - start), out);
    out.push_back(id);
    start = at + len;
  }
  return out;
}

void TiktokenTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  splitter_->split(text, [&](size_t b, size_t e) { encode_piece(text.data() + b, e - b, out); });
}

std::vector<std::string> TiktokenTokenizer::split(std::string_view text, bool ascii_fast_path) const {
  std::vector<std::string> pieces;
  splitter_->split(text, [&](size_t b, size_t e) { pieces.emplace_back(text.substr(b, e - b)); }, ascii_fast_path);
  return pieces;
}

// tiktoken's byte-pair merge: start from single bytes; repeatedly merge the adjacent pair whose
// concatenation has the lowest rank (leftmost on ties) until no adjacent concatenation is a token.
// Short pieces use tiktoken's own O(n^2) scan; long ones a heap that picks the same pair each step.
void TiktokenTokenizer::encode_piece(const char* p, size_t n, std::vector<int32_t>& out) const {
  const int32_t whole = rank_of(p, n);
  if (whole >= 0) {
    out.push_back(whole);
    return;
  }
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  auto rank_or_none = [&](size_t b, size_t e) {
    const int32_t r = rank_of(p + b, e - b);
    return r < 0 ? kNone : static_cast<uint32_t>(r);
  };
  if (n <= 128) {
    struct Part {
      uint32_t start, rank;  // rank of bytes [start, start of the part after next)
    };
    Part parts[130];
    size_t len = 0;
    for (size_t i = 0; i + 1 < n; ++i) parts[len++] = {static_cast<uint32_t>(i), rank_or_none(i, i + 2)};
    parts[len++] = {static_cast<uint32_t>(n - 1), kNone};
    parts[len++] = {static_cast<uint32_t>(n), kNone};
    auto pair_rank = [&](size_t i) { return i + 3 < len ? rank_or_none(parts[i].start, parts[i + 3].start) : kNone; };
    for (;;) {
      uint32_t best = kNone;
      size_t at = 0;
      for (size_t i = 0; i + 1 < len; ++i)
        if (parts[i].rank < best) best = parts[i].rank, at = i;
      if (best == kNone) break;
      if (at > 0) parts[at - 1].rank = pair_rank(at - 1);
      parts[at].rank = pair_rank(at);
      std::memmove(&parts[at + 1], &parts[at + 2], (len - at - 2) * sizeof(Part));
      --len;
    }
    for (size_t i = 0; i + 1 < len; ++i) out.push_back(rank_of(p + parts[i].start, parts[i + 1].start - parts[i].start));
    return;
  }
  // Long piece: doubly linked parts + min-heap of (rank, start, end) with lazy invalidation.
  std::vector<uint32_t> next(n + 1), prev(n + 1);
  std::vector<char> alive(n + 1, 1);
  for (size_t i = 0; i <= n; ++i) next[i] = static_cast<uint32_t>(i + 1), prev[i] = static_cast<uint32_t>(i ? i - 1 : 0);
  using Entry = std::tuple<uint32_t, uint32_t, uint32_t>;  // rank, start, end of the pair
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push_pair = [&](uint32_t start) {
    if (start >= n) return;
    const uint32_t mid = next[start];
    if (mid >= n) return;
    const uint32_t end = next[mid];
    const uint32_t r = rank_or_none(start, end);
    if (r != kNone) heap.emplace(r, start, end);
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    auto [r, start, end] = heap.top();
    heap.pop();
    if (!alive[start] || next[start] >= n || next[next[start]] != end) continue;  // stale
    const uint32_t mid = next[start];
    alive[mid] = 0;
    next[start] = end;
    prev[end] = start;
    if (start > 0) push_pair(prev[start]);
    push_pair(start);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(rank_of(p + i, next[i] - i));
}

// ---------------------------------------------------------------------------------------------
// Loading

namespace {

std::string read_file(const std::string& path, const char* what) {
  require_regular_file(path, what);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open {} ({})", path, what, std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, got);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) fail("{}: read error", path);
  return data;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict standard base64 with padding; false when malformed.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  if (in.back() == '=') pad = in[in.size() - 2] == '=' ? 2 : 1;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    for (int k = 0; k < 4; ++k) {
      const bool pad_slot = i + 4 == in.size() && k >= 4 - static_cast<int>(pad);
      v[k] = pad_slot ? 0 : base64_value(in[i + k]);
      if (v[k] < 0) return false;
    }
    const uint32_t w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>(w >> 16);
    if (!(i + 4 == in.size() && pad >= 2)) out += static_cast<char>((w >> 8) & 0xFF);
    if (!(i + 4 == in.size() && pad >= 1)) out += static_cast<char>(w & 0xFF);
  }
  return true;
}

}  // namespace

std::vector<std::string> parse_tiktoken_ranks(std::string_view data, const std::string& path) {
  // Ranks may leave gaps but stay below 2 * lines + 1024 (and 2^24), so one huge rank in a small
  // file cannot demand a table of gigabytes.
  const uint64_t lines = static_cast<uint64_t>(std::count(data.begin(), data.end(), '\n')) + 1;
  const uint32_t kMaxRank = static_cast<uint32_t>(std::min<uint64_t>(1u << 24, 2 * lines + 1024));
  std::vector<std::string> tokens;
  std::vector<uint32_t> line_of;  // line number per rank, 0: none yet
  std::string bytes;
  size_t pos = 0, line_no = 0;
  while (pos < data.size()) {
    size_t eol = data.find('\n', pos);
    if (eol == std::string::npos) eol = data.size();
    std::string_view line(data.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    std::string_view b64 = line.substr(0, sp), num = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    bool num_ok = !num.empty() && num.size() <= 9;
    for (char c : num) num_ok = num_ok && c >= '0' && c <= '9';
    if (b64.empty() || !num_ok) fail("{}:{}: expected '<base64> <rank>', got '{:.60}'", path, line_no, line);
    const uint32_t rank = static_cast<uint32_t>(std::stoul(std::string(num)));
    if (rank >= kMaxRank) fail("{}:{}: rank {} out of range", path, line_no, rank);
    if (!base64_decode(b64, bytes)) fail("{}:{}: bad base64 '{:.60}'", path, line_no, b64);
    if (rank >= tokens.size()) tokens.resize(rank + 1), line_of.resize(rank + 1, 0);
    if (line_of[rank]) fail("{}:{}: rank {} repeats line {}", path, line_no, rank, line_of[rank]);
    line_of[rank] = static_cast<uint32_t>(line_no);
    tokens[rank] = bytes;
  }
  if (tokens.empty()) fail("{}: no tokens", path);
  return tokens;
}

namespace {

std::vector<std::string> read_tiktoken_ranks(const std::string& path) {
  return parse_tiktoken_ranks(read_file(path, "tiktoken ranks"), path);
}

}  // namespace

std::unique_ptr<TiktokenTokenizer> make_tiktoken_tokenizer(const std::string& ranks_path,
                                                           const std::string& pcre2_pattern,
                                                           SpecialTokens specials) {
  return std::make_unique<TiktokenTokenizer>(read_tiktoken_ranks(ranks_path), pcre2_pattern, std::move(specials),
                                             ranks_path);
}

std::unique_ptr<Tokenizer> load_tiktoken_model_dir(const std::string& dir) {
  const std::string ranks_path = dir + "/tiktoken.model";
  const std::string config_path = dir + "/tokenizer_config.json";
  std::vector<std::string> tokens = read_tiktoken_ranks(ranks_path);
  const int32_t num_base = static_cast<int32_t>(tokens.size());

  const std::string config = read_file(config_path, "tokenizer config");
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(config).get(root)) fail("{}: broken JSON ({})", config_path, simdjson::error_message(err));
  simdjson::dom::object added;
  if (root["added_tokens_decoder"].get(added)) fail("{}: no added_tokens_decoder object", config_path);
  std::unordered_map<int32_t, std::string> named;
  for (auto field : added) {
    const std::string_view key = field.key;
    int64_t id = -1;
    bool ok = !key.empty() && key.size() <= 9;
    for (char c : key) ok = ok && c >= '0' && c <= '9';
    if (ok) id = std::stoll(std::string(key));
    std::string_view content;
    if (!ok || field.value["content"].get(content))
      fail("{}: added_tokens_decoder entry '{}' needs a numeric id and a \"content\" string", config_path, key);
    named[static_cast<int32_t>(id)] = std::string(content);
  }
  SpecialTokens specials;
  for (int32_t id = num_base; id < num_base + 256; ++id) {
    auto it = named.find(id);
    specials.emplace_back(it != named.end() ? it->second : fmt::format("<|reserved_token_{}|>", id), id);
  }
  for (const auto& [id, text] : named)
    if (id < num_base || id >= num_base + 256) specials.emplace_back(text, id);
  return std::make_unique<TiktokenTokenizer>(std::move(tokens), kimi_split_pattern(), std::move(specials),
                                             ranks_path);
}

}  // namespace deltafin
