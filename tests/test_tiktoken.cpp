// The tiktoken tokenizer against references: js-tiktoken's o200k_base ids (DELTAFIN_TEXT_REF, made by
// tests/text/reference_tiktoken.mjs), Python tiktoken with Kimi's pattern (fixtures made by
// tools/make_kimi_split_reference.py), round trips, special tokens and loader errors.
#include "text/tiktoken_tokenizer.hpp"
#include "tokenizer_test_util.hpp"
#include "util/error.hpp"

#include <catch2/catch.hpp>
#include <simdjson.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

using namespace deltafin;

namespace {

std::string ref_dir() { return test::text_ref_dir("reference_tiktoken.mjs"); }

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

const TiktokenTokenizer& o200k() {
  static const auto tok = make_tiktoken_tokenizer(ref_dir() + "/o200k_base.tiktoken", o200k_split_pattern(), {});
  return *tok;
}

const TiktokenTokenizer& o200k_with_kimi_pattern() {
  static const auto tok = make_tiktoken_tokenizer(ref_dir() + "/o200k_base.tiktoken", kimi_split_pattern(), {});
  return *tok;
}

std::string write_temp(const std::string& name, const std::string& content) {
  const auto dir = std::filesystem::temp_directory_path() / "deltafin-test-tiktoken";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// A ranks file with all 256 single bytes (ranks 0..255) plus `extra` lines.
std::string small_ranks(const std::string& extra) {
  std::string s;
  const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int b = 0; b < 256; ++b) {
    s += tbl[b >> 2];
    s += tbl[(b & 3) << 4];
    s += "== " + std::to_string(b) + "\n";
  }
  return s + extra;
}

}  // namespace

TEST_CASE("o200k pattern: ids identical to js-tiktoken for every valid corpus string", "[tokenizer]") {
  const auto ref = test::read_ref_ids(ref_dir() + "/o200k_ids.json");
  const test::TextCorpus& c = test::text_corpus();
  REQUIRE(ref.size() == c.texts.size());
  size_t compared = 0;
  for (size_t i = 0; i < c.texts.size(); ++i) {
    if (c.invalid.count(i)) continue;
    REQUIRE(ref[i].has_value());
    const auto ids = o200k().encode(c.texts[i], false);
    INFO("corpus[" << i << "] = \"" << c.texts[i] << "\"\n ours: " << show(ids) << "\n  ref: " << show(*ref[i]));
    CHECK(ids == *ref[i]);
    ++compared;
  }
  CHECK(compared == c.texts.size() - c.invalid.size());
}

TEST_CASE("tiktoken: decode(encode(s)) == s for every corpus string, invalid UTF-8 included", "[tokenizer]") {
  const test::TextCorpus& c = test::text_corpus();
  REQUIRE(c.texts.size() == 584);
  for (size_t i = 0; i < c.texts.size(); ++i) {
    INFO("corpus[" << i << "]");
    CHECK(o200k().decode(o200k().encode(c.texts[i], false)) == c.texts[i]);
    CHECK(o200k().decode(o200k().encode(c.texts[i], true)) == c.texts[i]);
    CHECK(o200k_with_kimi_pattern().decode(o200k_with_kimi_pattern().encode(c.texts[i], false)) == c.texts[i]);
    std::string joined;
    for (const auto& piece : o200k_with_kimi_pattern().split(c.texts[i])) joined += piece;
    CHECK(joined == c.texts[i]);
  }
}

TEST_CASE("tiktoken: invalid UTF-8 bytes split like punctuation", "[tokenizer]") {
  const auto& tok = o200k();
  CHECK(tok.split("abc\x80" "def") == std::vector<std::string>{"abc", "\x80" "def"});
  CHECK(tok.split("ok\xfe\xfeok") == std::vector<std::string>{"ok", "\xfe\xfe", "ok"});  // like "ok!!ok"
  CHECK(tok.split("a \xff\xff!") == std::vector<std::string>{"a", " \xff\xff!"});
  CHECK(tok.split("\xe4\xbd") == std::vector<std::string>{"\xe4\xbd"});
  for (const std::string& s : std::vector<std::string>{"\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "x\xc3", std::string("\0\xff", 2)})
    CHECK(tok.decode(tok.encode(s, true)) == s);
}

TEST_CASE("tiktoken: special tokens split first when allowed, longest match", "[tokenizer]") {
  const std::string ranks = ref_dir() + "/o200k_base.tiktoken";
  const auto tok = make_tiktoken_tokenizer(
      ranks, o200k_split_pattern(), {{"<|endoftext|>", 199999}, {"<|im", 200100}, {"<|im_end|>", 200101}});
  CHECK(tok->vocab_size() == 200102);
  CHECK(tok->special_id("<|im_end|>") == 200101);
  CHECK(!tok->special_id("<|nope|>").has_value());
  CHECK(tok->token_bytes(200101) == "<|im_end|>");
  CHECK(tok->token_bytes(199998).empty());  // a gap in o200k's ranks
  CHECK(tok->token_bytes(-1).empty());

  const std::string text = "hi<|im_end|>there<|im x<|endoftext|>";
  const auto with = tok->encode(text, true);
  std::vector<int32_t> expect = tok->encode("hi", false);
  expect.push_back(200101);
  for (int32_t id : tok->encode("there", false)) expect.push_back(id);
  expect.push_back(200100);
  for (int32_t id : tok->encode(" x", false)) expect.push_back(id);
  expect.push_back(199999);
  CHECK(with == expect);
  CHECK(tok->decode(with) == text);

  const auto without = tok->encode(text, false);
  CHECK(without == o200k().encode(text, false));
  for (int32_t id : without) CHECK(id < 199998);
  CHECK(tok->decode(without) == text);
  CHECK(tok->encode("<|im_end|>", true) == std::vector<int32_t>{200101});
  CHECK(tok->encode("", true).empty());
}

TEST_CASE("Kimi pattern: ids identical to Python tiktoken (kimi_pattern_o200k_ids.json)", "[tokenizer]") {
  const std::string path = test::fixture("text/kimi_pattern_o200k_ids.json");  // tools/make_kimi_split_reference.py
  const auto ref = test::read_ref_ids(path);
  const test::TextCorpus& c = test::text_corpus();
  REQUIRE(ref.size() == c.texts.size());
  for (size_t i = 0; i < c.texts.size(); ++i) {
    if (c.invalid.count(i)) continue;
    REQUIRE(ref[i].has_value());
    const auto ids = o200k_with_kimi_pattern().encode(c.texts[i], false);
    INFO("corpus[" << i << "] = \"" << c.texts[i] << "\"\n ours: " << show(ids) << "\n  ref: " << show(*ref[i]));
    CHECK(ids == *ref[i]);
  }
}

TEST_CASE("Kimi pattern: pieces identical to Python regex (kimi_pattern_pieces.json)", "[tokenizer]") {
  const std::string path = test::fixture("text/kimi_pattern_pieces.json");  // tools/make_kimi_split_reference.py
  simdjson::dom::parser parser;
  simdjson::dom::array all = parser.load(path).get_array();
  const test::TextCorpus& c = test::text_corpus();
  REQUIRE(all.size() == c.texts.size());
  size_t i = 0;
  for (simdjson::dom::element e : all) {
    if (!c.invalid.count(i)) {
      std::vector<std::string> ref;
      for (std::string_view s : e.get_array()) ref.emplace_back(s);
      INFO("corpus[" << i << "] = \"" << c.texts[i] << "\"");
      CHECK(o200k_with_kimi_pattern().split(c.texts[i]) == ref);
    }
    ++i;
  }
}

TEST_CASE("Kimi pattern: && rewrite and Script=Han", "[tokenizer]") {
  CHECK(kimi_split_pattern().find("&&") == std::string::npos);
  CHECK(kimi_split_pattern().find(R"((?:(?![\p{sc:Han}])[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)") != std::string::npos);
  CHECK(o200k_split_pattern() == kO200kPatStr);
  const auto& tok = o200k_with_kimi_pattern();
  CHECK(tok.split("中文English混合text测试123") ==
        std::vector<std::string>{"中文", "English", "混合", "text", "测试", "123"});
  CHECK(tok.split("今天天气很好。") == std::vector<std::string>{"今天天气很好", "。"});
}

TEST_CASE("tiktoken loader: bad input gives one-line errors naming file and line", "[tokenizer]") {
  auto error_of = [](const std::string& path) -> std::string {
    try {
      make_tiktoken_tokenizer(path, o200k_split_pattern(), {});
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  using Catch::Contains;
  const std::string missing = write_temp("x", "") + ".missing";
  CHECK_THAT(error_of(missing), Contains(missing) && Contains("cannot open"));

  const std::string no_rank = write_temp("no_rank.tiktoken", small_ranks("YWI=\n"));
  CHECK_THAT(error_of(no_rank), Contains(no_rank + ":257:") && Contains("expected"));
  const std::string bad_rank = write_temp("bad_rank.tiktoken", small_ranks("YWI= 12x\n"));
  CHECK_THAT(error_of(bad_rank), Contains(bad_rank + ":257:"));
  const std::string bad_b64 = write_temp("bad_b64.tiktoken", small_ranks("YW*= 256\n"));
  CHECK_THAT(error_of(bad_b64), Contains(bad_b64 + ":257:") && Contains("bad base64"));
  const std::string bad_pad = write_temp("bad_pad.tiktoken", small_ranks("YWI 256\n"));
  CHECK_THAT(error_of(bad_pad), Contains(bad_pad + ":257:") && Contains("bad base64"));
  // One huge rank in a small file (issue 12, item 9): refused before any table is sized by it.
  const std::string huge = write_temp("huge_rank.tiktoken", small_ranks("YWI= 9999999\n"));
  CHECK_THAT(error_of(huge), Contains(huge + ":257:") && Contains("rank 9999999 out of range"));
  const std::string dup = write_temp("dup.tiktoken", small_ranks("YWI= 256\nYWM= 256\n"));
  CHECK_THAT(error_of(dup), Contains(dup + ":258:") && Contains("repeats line 257"));
  const std::string dup_bytes = write_temp("dup_bytes.tiktoken", small_ranks("YWI= 256\nYWI= 257\n"));
  CHECK_THAT(error_of(dup_bytes), Contains(dup_bytes) && Contains("same bytes"));
  const std::string no_byte = write_temp("no_byte.tiktoken", "YQ== 0\n");
  CHECK_THAT(error_of(no_byte), Contains(no_byte) && Contains("0x00"));
  for (const auto& msg : {error_of(no_rank), error_of(bad_b64), error_of(dup)}) CHECK(msg.find('\n') == std::string::npos);

  const std::string ok = write_temp("ok.tiktoken", small_ranks("YWI= 256\r\n\nYWJj 300\n"));
  const auto tok = make_tiktoken_tokenizer(ok, o200k_split_pattern(), {});
  CHECK(tok->encode("abc ab", false) == std::vector<int32_t>{300, 32, 256});
  CHECK(tok->vocab_size() == 301);
}

TEST_CASE("tiktoken: Kimi model dir with tokenizer_config.json", "[tokenizer]") {
  const auto dir = std::filesystem::temp_directory_path() / "deltafin-test-tiktoken-kimi";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tiktoken.model") << small_ranks("YWI= 256\n");
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"added_tokens_decoder": {"257": {"content": "[BOS]", "special": true}, "259": {"content": "<|im_end|>"}}})";
  const auto tok = load_tiktoken_model_dir(dir.string());
  CHECK(tok->vocab_size() == 257 + 256);
  CHECK(tok->special_id("[BOS]") == 257);
  CHECK(tok->special_id("<|im_end|>") == 259);
  CHECK(tok->special_id("<|reserved_token_258|>") == 258);
  CHECK(tok->token_bytes(512) == "<|reserved_token_512|>");
  CHECK(tok->encode("ab<|im_end|>", true) == std::vector<int32_t>{256, 259});

  std::filesystem::remove(dir / "tokenizer_config.json");
  try {
    load_tiktoken_model_dir(dir.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("tokenizer_config.json"));
  }
}

TEST_CASE("tiktoken: ASCII fast path splits exactly like PCRE2 alone", "[tokenizer]") {
  // Random strings over an alphabet rich in the characters the pattern treats specially.
  const std::vector<std::string> alphabet = {
      "a", "b", "z", "A", "Q", "Z", "s", "S", "t", "r", "e", "E", "v", "l", "L", "m", "d", "D", "'", "0", "7", " ",
      " ", "\t", "\n", "\r", "\v", "\f", "/", ".", "!", "-", "_", "\x01", "\x7f", "é", "É", "ſ", "中", "。", "٣",
      "\xc2\xa0", "\xc2\x85", "\xe2\x80\xa8", "\xcc\x81", "—", "😀", "\xff", "\x80"};
  uint64_t state = 0x243F6A8885A308D3ull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  for (const TiktokenTokenizer* tok : {&o200k(), &o200k_with_kimi_pattern()}) {
    for (int iter = 0; iter < 20000; ++iter) {
      std::string s;
      const size_t len = next() % 24;
      const size_t letters = iter % 2 ? alphabet.size() : 35;  // every other string: ASCII only
      for (size_t k = 0; k < len; ++k) s += alphabet[next() % letters];
      INFO("text \"" << s << "\"");
      REQUIRE(tok->split(s, true) == tok->split(s, false));
    }
  }
  const test::TextCorpus& c = test::text_corpus();
  for (size_t i = 0; i < c.texts.size(); ++i) {
    INFO("corpus[" << i << "]");
    CHECK(o200k().split(c.texts[i], true) == o200k().split(c.texts[i], false));
    CHECK(o200k_with_kimi_pattern().split(c.texts[i], true) == o200k_with_kimi_pattern().split(c.texts[i], false));
  }
}
