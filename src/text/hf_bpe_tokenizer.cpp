// HfBpeTokenizer: Hugging Face tokenizer.json byte-level BPE (see hf_bpe_tokenizer.hpp).
// Pipeline per encode(): added tokens (byte trie, leftmost-longest) -> normalizer (ICU NFC/NFD/
// NFKC/NFKD, skipped when the text cannot change) -> regex splits (PCRE2, JIT) -> BPE per piece
// with a merge table keyed by symbol-id pairs and a piece cache.
// Loading tokenizer.json is in hf_bpe_loader.cpp; the shared state in hf_bpe_impl.hpp.
#include "text/hf_bpe_tokenizer.hpp"

#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <queue>

#include "text/hf_bpe_impl.hpp"
#include "text/utf8.hpp"
#include "util/error.hpp"

namespace deltafin {

using namespace hf_bpe;

namespace {

// JavaScript's String.prototype.trim whitespace (transformers.js strips lstrip/rstrip neighbours so).
bool is_js_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

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

constexpr size_t kMaxCachedPiece = 256;
constexpr size_t kMaxCacheEntries = 1 << 20;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Encoding steps: BPE, normalization, splits, added tokens

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
    const size_t bad = utf8::first_invalid(s, n, i);
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
  if (utf8::first_invalid(s, n) < n) {
    utf8::replace_invalid(s, n, view, at);
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
    normalized = std::string(" ").append(text);  // not " " + string: GCC 12's -Wrestrict misfires on it
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
        const uint32_t c = utf8::cp_at(s, k, text.size(), l);
        return c == '_' || (c != utf8::kInvalid && u_isalnum(static_cast<UChar32>(c)));
      };
      if ((i > 0 && is_word(utf8::char_before(s, 0, i))) || (j + 1 < text.size() && is_word(j + 1))) continue;
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
      for (Section& p = sections[k - 1];
           p.e > p.b && is_js_space(utf8::cp_at(s, utf8::char_before(s, p.b, p.e), p.e, l));)
        p.e -= l;
    if (t.rstrip && k + 1 < sections.size() && sections[k + 1].added < 0)
      for (Section& q = sections[k + 1]; q.b < q.e && is_js_space(utf8::cp_at(s, q.b, q.e, l));) q.b += l;
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
    buf = std::string(" ").append(text);
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

}  // namespace deltafin
