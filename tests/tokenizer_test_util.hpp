// Helpers shared by the tokenizer tests (test_tiktoken.cpp, test_hf_tokenizer.cpp): the shared
// text corpus (tests/fixtures/text/corpus.json, base64 strings, and corpus_invalid.json, the
// indices of the strings that are not valid UTF-8), the reference directory $DELTAFIN_TEXT_REF
// (made by the node scripts in tests/text) and its id files. Header-only: the test glob compiles
// only tests/test_*.cpp.
#pragma once

#include <catch2/catch.hpp>
#include <simdjson.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "test_util.hpp"

namespace deltafin::test {

// Base64 (standard alphabet) to bytes; '=' padding and other characters are skipped.
inline std::string b64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

struct TextCorpus {
  std::vector<std::string> texts;
  std::set<size_t> invalid;  // indices of the texts that are not valid UTF-8
};

// The tokenizer test corpus (584 strings), loaded once.
inline const TextCorpus& text_corpus() {
  static const TextCorpus c = [] {
    TextCorpus c;
    simdjson::dom::parser parser;
    for (std::string_view s : parser.load(fixture("text/corpus.json")).get_array()) c.texts.push_back(b64_decode(s));
    for (int64_t i : parser.load(fixture("text/corpus_invalid.json")).get_array())
      c.invalid.insert(static_cast<size_t>(i));
    return c;
  }();
  return c;
}

// $DELTAFIN_TEXT_REF; the test fails, naming the node script that makes it (tests/text/<script>),
// when it is not set.
inline std::string text_ref_dir(const std::string& script) {
  const char* dir = std::getenv("DELTAFIN_TEXT_REF");
  if (!dir || !*dir)
    FAIL("DELTAFIN_TEXT_REF is not set: run `node tests/text/"
         << script << " build/text-ref` and export DELTAFIN_TEXT_REF=build/text-ref first");
  return dir;
}

// A reference id file: a JSON array, one entry per corpus string, of id arrays or null (the
// reference cannot encode the invalid-UTF-8 strings).
inline std::vector<std::optional<std::vector<int32_t>>> read_ref_ids(const std::string& path) {
  simdjson::dom::parser parser;
  std::vector<std::optional<std::vector<int32_t>>> out;
  for (simdjson::dom::element e : parser.load(path).get_array()) {
    if (e.is_null()) {
      out.emplace_back(std::nullopt);
      continue;
    }
    std::vector<int32_t> ids;
    for (int64_t v : e.get_array()) ids.push_back(static_cast<int32_t>(v));
    out.emplace_back(std::move(ids));
  }
  return out;
}

}  // namespace deltafin::test
