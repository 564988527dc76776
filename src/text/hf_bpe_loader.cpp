// load_hf_tokenizer (see hf_bpe_tokenizer.hpp): reads tokenizer.json (simdjson) into
// HfBpeTokenizer::Impl (hf_bpe_impl.hpp): the BPE model (vocab over the GPT-2 byte alphabet,
// merges), added tokens (a byte trie), normalizers and pre-tokenizer split steps.
// Regexes: PCRE2 accepts DeepSeek-V3's and Qwen3's verbatim; the one rewrite is \s/\S spelled out
// as Oniguruma's set (hf_pattern_to_pcre2). Known differences from transformers.js, none in the
// test corpus: JS's \s excludes U+0085 and includes U+FEFF (we follow HF tokenizers/Oniguruma), and
// JS spells Qwen's (?i:'s|...) ASCII-only while PCRE2 and HF also take "'ſ" (U+017F).
#include "text/hf_bpe_tokenizer.hpp"

#include <simdjson.h>
#include <unicode/normalizer2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "text/hf_bpe_impl.hpp"
#include "text/utf8.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

namespace deltafin {

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

}  // namespace

namespace hf_bpe {

namespace {

// ---------------------------------------------------------------------------------------------
// Byte-level alphabet (GPT-2 bytes_to_unicode)

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

// ---------------------------------------------------------------------------------------------
// Regexes

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

// The GPT-2 pattern ByteLevel applies when use_regex is true (HF tokenizers' byte_level.rs).
const char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& where) {
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
Regex::~Regex() { pcre2_code_free(code_); }

// ---------------------------------------------------------------------------------------------
// Loading tokenizer.json

namespace {

struct Loader {
  const std::string& path;
  HfBpeTokenizer::Impl& m;
  // Entries (vocab + added tokens). Ids may leave gaps but stay below 2 * entries + 1024, so one
  // huge id in a small file cannot demand a table of gigabytes.
  int64_t entries = 0;
  bool saw_byte_level = false;

  void check_id(int64_t id, const std::string& entry) const {
    const int64_t limit = 2 * entries + 1024;
    if (id >= limit)
      fail("{}: {} has id {}, far past the file's {} entries (ids must be below {})", path, entry, id, entries, limit);
  }

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
      const size_t l = utf8::char_len(s, i, t.size());
      if (!l) return false;
      const uint32_t c = utf8::decode(s, i, l);
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
      check_id(id, fmt::format("model.vocab[\"{}\"]", key));
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
      check_id(id, field);
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

}  // namespace hf_bpe

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path) {
  const std::string& path = tokenizer_json_path;
  simdjson::padded_string json;
  require_regular_file(path, "tokenizer.json");
  if (auto err = simdjson::padded_string::load(path).get(json))
    fail("{}: cannot read tokenizer.json ({})", path, simdjson::error_message(err));
  return parse_hf_tokenizer(std::string_view(json.data(), json.size()), path);
}

std::unique_ptr<Tokenizer> parse_hf_tokenizer(std::string_view text, const std::string& path) {
  simdjson::dom::parser parser;
  const simdjson::padded_string json(text);
  element root;
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", path, simdjson::error_message(err));
  if (!root.is_object()) fail("{}: not a tokenizer.json (top level is not an object)", path);

  auto impl = std::make_unique<HfBpeTokenizer::Impl>();
  impl->source = path;
  hf_bpe::Loader loader{path, *impl};
  element e;
  {
    simdjson::dom::object vocab;
    simdjson::dom::array added;
    if (!root["model"]["vocab"].get(vocab)) loader.entries += static_cast<int64_t>(vocab.size());
    if (!root["added_tokens"].get(added)) loader.entries += static_cast<int64_t>(added.size());
  }
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
