// Tests of the Hugging Face tokenizer.json byte-level BPE tokenizer (src/text/hf_bpe_tokenizer.*):
// ids identical to transformers.js for DeepSeek-V3 and Qwen3 over the shared corpus (reference
// made by tests/text/reference_hf.mjs into $DELTAFIN_TEXT_REF), round trips including invalid
// UTF-8, added/special tokens, split behaviours and loader errors on small synthetic files.
#include <catch2/catch.hpp>
#include <simdjson.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/hf_bpe_tokenizer.hpp"
#include "tokenizer_test_util.hpp"
#include "util/error.hpp"

using namespace deltafin;

namespace {

std::string ref_dir() { return test::text_ref_dir("reference_hf.mjs"); }

const Tokenizer& ref_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[name];
  if (!t) t = load_hf_tokenizer(ref_dir() + "/" + name + "/tokenizer.json");
  return *t;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

void check_against_reference(const std::string& name) {
  const std::string dir = ref_dir();
  const Tokenizer& tok = ref_tokenizer(name);
  const auto ref = test::read_ref_ids(dir + "/" + name + "_ids.json");
  const test::TextCorpus& c = test::text_corpus();
  REQUIRE(ref.size() == c.texts.size());
  size_t compared = 0;
  for (size_t i = 0; i < c.texts.size(); ++i) {
    if (c.invalid.count(i)) {
      REQUIRE_FALSE(ref[i].has_value());
      continue;
    }
    REQUIRE(ref[i].has_value());
    const std::vector<int32_t> ids = tok.encode(c.texts[i], /*allow_special=*/true);  // JS always splits them
    if (ids != *ref[i]) {
      FAIL(name << ": first mismatch at corpus[" << i << "] = \"" << c.texts[i] << "\"\n ours: " << show(ids)
                << "\n  ref: " << show(*ref[i]));
    }
    ++compared;
  }
  CHECK(compared == 560);
}

// ----- synthetic tokenizer.json files for behaviour and loader tests

std::string byte_symbol(int b) {  // GPT-2 bytes_to_unicode, as UTF-8
  int extra = 0, cp = 0;
  for (int x = 0; x <= b; ++x) {
    const bool keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    cp = keep ? x : 256 + extra++;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += static_cast<char>(c);
    else if (c < 0x20) o += fmt::format("\\u{:04x}", c);
    else o += static_cast<char>(c);
  }
  return o;
}

// A byte-level BPE: the 256 byte symbols (ids 0..255), merges "h e"->256, "l l"->257, "he ll"->258,
// "Ġ w"->259, plus "<|end|>" (special, 300) and "<tool>" (non-special, 301).
std::string synthetic_json(const std::string& pre_tokenizer, const std::string& model_type = "BPE",
                           const std::string& extra_merge = "", const std::string& normalizer = "null",
                           const std::string& added_extra = "") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += fmt::format("\"{}\": {},", json_escape(byte_symbol(b)), b);
  const std::string G = byte_symbol(' ');
  vocab += fmt::format("\"he\": 256, \"ll\": 257, \"hell\": 258, \"{}w\": 259", G);
  std::string merges = fmt::format("\"h e\", [\"l\", \"l\"], \"he ll\", \"{} w\"", G);
  if (!extra_merge.empty()) merges += ", " + extra_merge;
  return fmt::format(
      R"({{"version": "1.0", "added_tokens": [
  {{"id": 300, "content": "<|end|>", "special": true, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false}},
  {{"id": 301, "content": "<tool>", "special": false, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false}}{}],
 "normalizer": {}, "pre_tokenizer": {}, "post_processor": null,
 "decoder": {{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}},
 "model": {{"type": "{}", "dropout": null, "unk_token": null, "vocab": {{{}}}, "merges": [{}]}}}})",
      added_extra, normalizer, pre_tokenizer, model_type, vocab, merges);
}

const char kByteLevelRegex[] = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("deltafin_hf_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

std::string load_error(const std::string& path) {
  try {
    load_hf_tokenizer(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("hf tokenizer: DeepSeek-V3 ids identical to transformers.js for every valid corpus string", "[tokenizer]") {
  check_against_reference("deepseek_v3");
}

TEST_CASE("hf tokenizer: Qwen3 ids identical to transformers.js for every valid corpus string", "[tokenizer]") {
  check_against_reference("qwen3");
}

TEST_CASE("hf tokenizer: decode(encode(s)) round trips every corpus string, invalid UTF-8 included", "[tokenizer]") {
  const test::TextCorpus& c = test::text_corpus();
  const Tokenizer& ds = ref_tokenizer("deepseek_v3");
  const auto& qw = dynamic_cast<const HfBpeTokenizer&>(ref_tokenizer("qwen3"));
  size_t changed_by_nfc = 0;
  for (size_t i = 0; i < c.texts.size(); ++i) {
    INFO("corpus[" << i << "]");
    const std::string& s = c.texts[i];
    for (bool allow : {true, false}) {
      CHECK(ds.decode(ds.encode(s, allow)) == s);        // DeepSeek-V3: no normalizer
      CHECK(qw.decode(qw.encode(s, allow)) == qw.normalize(s));  // Qwen3: NFC first
    }
    if (qw.normalize(s) != s) ++changed_by_nfc;
  }
  CHECK(changed_by_nfc > 0);  // the combining-mark and Hangul-jamo strings
  CHECK(qw.normalize("e\xCC\x81") == "\xC3\xA9");                        // e + U+0301 -> é
  CHECK(qw.normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");  // jamo -> 각
  CHECK(qw.normalize("e\xCC\x81\xFF" "e\xCC\x81") == "\xC3\xA9\xFF\xC3\xA9");  // bad bytes kept, runs normalized
}

TEST_CASE("hf tokenizer: invalid UTF-8 bytes are encoded, never rejected", "[tokenizer]") {
  const Tokenizer& ds = ref_tokenizer("deepseek_v3");
  for (std::string s : {std::string("\xFF"), std::string("abc\x80" "def"), std::string("\xF0\x9F\x98"),
                        std::string("ok\xFE\xFEok"), std::string("\xED\xA0\x80 x")}) {
    std::vector<int32_t> ids;
    REQUIRE_NOTHROW(ids = ds.encode(s, true));
    CHECK(!ids.empty());
    CHECK(ds.decode(ids) == s);
  }
}

TEST_CASE("hf tokenizer: added tokens split out, special ones only when allowed", "[tokenizer]") {
  const Tokenizer& qw = ref_tokenizer("qwen3");
  REQUIRE(qw.special_id("<|im_end|>") == 151645);
  REQUIRE(qw.special_id("<think>") == 151667);
  CHECK_FALSE(qw.special_id("<|no_such_token|>").has_value());
  CHECK(qw.vocab_size() == 151669);

  const std::vector<int32_t> allowed = qw.encode("hi<|im_end|>", true);
  REQUIRE(allowed.size() >= 2);
  CHECK(allowed.back() == 151645);
  const std::vector<int32_t> plain = qw.encode("hi<|im_end|>", false);
  CHECK(std::find(plain.begin(), plain.end(), 151645) == plain.end());
  CHECK(plain.size() > allowed.size());
  CHECK(qw.decode(plain) == "hi<|im_end|>");
  CHECK(qw.decode(allowed) == "hi<|im_end|>");
  CHECK(qw.token_bytes(151645) == "<|im_end|>");
  // Non-special added tokens are always recognised (HF and transformers.js do so too).
  CHECK(qw.encode("<think>", false) == std::vector<int32_t>{151667});
  CHECK(qw.encode("<|im_start|>user\n<think>\n", true).front() == 151644);

  const auto& ds = dynamic_cast<const HfBpeTokenizer&>(ref_tokenizer("deepseek_v3"));
  // \s is Oniguruma's (HF tokenizers'): U+0085 is a space, U+180E is not (PCRE2 alone says it is).
  using V = std::vector<std::string>;
  CHECK(ds.pre_tokenize("a \xC2\x85 b") == V{"a", " \xC2\x85", " b"});
  CHECK(ds.pre_tokenize("x\xE1\xA0\x8E y") == V{"x", "\xE1\xA0\x8E", " y"});
  const std::string bos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  REQUIRE(ds.special_id(bos) == 0);
  CHECK(ds.encode(bos + "Hi", true).front() == 0);
  CHECK(ds.encode(bos + "Hi", false).front() != 0);
  CHECK(ds.token_bytes(0) == bos);
  CHECK(ds.vocab_size() == 128815);
  CHECK(ds.token_bytes(-1).empty());
  CHECK(ds.token_bytes(1 << 30).empty());
}

TEST_CASE("hf tokenizer: synthetic file, BPE merges, ByteLevel regex and split behaviours", "[tokenizer]") {
  TempDir dir;
  const std::string G = byte_symbol(' ');
  auto tok = load_hf_tokenizer(dir.write("bl.json", synthetic_json(kByteLevelRegex)));
  const auto& hf = dynamic_cast<const HfBpeTokenizer&>(*tok);
  CHECK(hf.pre_tokenize("hello world's  x") == std::vector<std::string>{"hello", " world", "'s", " ", " x"});
  CHECK(tok->encode("hello", true) == std::vector<int32_t>{258, 'o'});
  CHECK(tok->encode(" w", true) == std::vector<int32_t>{259});
  CHECK(tok->encode("a<|end|>b", true) == std::vector<int32_t>{'a', 300, 'b'});
  CHECK(tok->encode("a<tool>b", false) == std::vector<int32_t>{'a', 301, 'b'});
  CHECK(tok->special_id("<tool>") == 301);
  CHECK(tok->vocab_size() == 302);

  auto split = [&](const std::string& behavior, bool invert) {
    const std::string pre = fmt::format(
        R"({{"type": "Split", "pattern": {{"String": "-"}}, "behavior": "{}", "invert": {}}})", behavior,
        invert ? "true" : "false");
    auto t = load_hf_tokenizer(dir.write("split.json", synthetic_json(pre)));
    return dynamic_cast<const HfBpeTokenizer&>(*t).pre_tokenize("a-b--c");
  };
  using V = std::vector<std::string>;
  CHECK(split("Isolated", false) == V{"a", "-", "b", "-", "-", "c"});
  CHECK(split("Removed", false) == V{"a", "b", "c"});
  CHECK(split("MergedWithPrevious", false) == V{"a-", "b-", "-", "c"});
  CHECK(split("MergedWithNext", false) == V{"a", "-b", "-", "-c"});
  CHECK(split("Contiguous", false) == V{"a", "-", "b", "--", "c"});
  CHECK(split("Removed", true) == V{"-", "-", "-"});  // HF: invert flips each segment, adjacent ones stay apart

  // lstrip / rstrip swallow the whitespace next to the token.
  auto strip = load_hf_tokenizer(dir.write(
      "strip.json", synthetic_json(kByteLevelRegex, "BPE", "", "null",
                                   R"(, {"id": 302, "content": "<s>", "special": true, "lstrip": true, "rstrip": true})")));
  CHECK(strip->encode("a  <s>  b", true) == std::vector<int32_t>{'a', 302, 'b'});

  // NFC normalizer from the synthetic file.
  auto nfc = load_hf_tokenizer(dir.write("nfc.json", synthetic_json("null", "BPE", "", R"({"type": "NFC"})")));
  CHECK(nfc->decode(nfc->encode("e\xCC\x81", true)) == "\xC3\xA9");
}

TEST_CASE("hf tokenizer loader: bad input gives one-line errors naming file and field", "[tokenizer]") {
  using Catch::Contains;
  TempDir dir;
  const std::string missing = (dir.path / "nope.json").string();
  CHECK_THAT(load_error(missing), Contains(missing));

  const std::string broken = dir.write("broken.json", R"({"model": {"type": "BPE", "vocab": {)");
  CHECK_THAT(load_error(broken), Contains(broken) && Contains("broken JSON"));

  const std::string wordpiece = dir.write("wp.json", synthetic_json(kByteLevelRegex, "WordPiece"));
  CHECK_THAT(load_error(wordpiece), Contains(wordpiece) && Contains("model.type") && Contains("WordPiece"));

  const std::string bad_merge = dir.write("merge.json", synthetic_json(kByteLevelRegex, "BPE", "\"zz q\""));
  CHECK_THAT(load_error(bad_merge), Contains(bad_merge) && Contains("model.merges[4]") && Contains("zz"));

  const std::string bad_pre = dir.write("pre.json", synthetic_json(R"({"type": "Whitespace"})"));
  CHECK_THAT(load_error(bad_pre), Contains(bad_pre) && Contains("pre_tokenizer.type") && Contains("Whitespace"));

  const std::string bad_norm =
      dir.write("norm.json", synthetic_json(kByteLevelRegex, "BPE", "", R"({"type": "Lowercase"})"));
  CHECK_THAT(load_error(bad_norm), Contains(bad_norm) && Contains("normalizer.type") && Contains("Lowercase"));

  const std::string bad_regex = dir.write(
      "re.json", synthetic_json(R"({"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"})"));
  CHECK_THAT(load_error(bad_regex), Contains(bad_regex) && Contains("pre_tokenizer.pattern"));

  const std::string not_object = dir.write("arr.json", "[1, 2]");
  CHECK_THAT(load_error(not_object), Contains(not_object));

  // One huge id in a small file (issue 12, item 9: 100,000,000 once cost 3.1 GB): refused, naming the entry.
  std::string huge_json = synthetic_json(kByteLevelRegex);
  const size_t at = huge_json.find("\"he\": 256");
  REQUIRE(at != std::string::npos);
  huge_json.replace(at, std::string("\"he\": 256").size(), "\"he\": 100000000");
  const std::string huge = dir.write("huge.json", huge_json);
  CHECK_THAT(load_error(huge), Contains(huge) && Contains("model.vocab[\"he\"]") && Contains("100000000"));
  std::string huge_added = synthetic_json(kByteLevelRegex);
  const size_t added_at = huge_added.find("300");
  REQUIRE(added_at != std::string::npos);
  huge_added.replace(added_at, 3, "99999999");
  const std::string huge2 = dir.write("huge2.json", huge_added);
  CHECK_THAT(load_error(huge2), Contains("added_tokens[") && Contains("99999999"));
  for (const std::string& p : {missing, broken, wordpiece, bad_merge, bad_pre, bad_norm, bad_regex})
    CHECK(load_error(p).find('\n') == std::string::npos);
}
