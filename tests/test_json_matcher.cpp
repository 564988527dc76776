// Tests of structured output's JSON matcher, schema compiler and vocabulary trie
// (src/text/json_matcher.*, json_schema.*, token_trie.*): against an outside reference, the
// fixture corpus tests/fixtures/structured/*.json, whose documents Python's json module and
// python3-jsonschema labelled (make_fixtures.py): every valid document is taken whole (so none of
// its prefixes is refused), every invalid one and every one marked outside the documented subset
// is refused at some byte or left incomplete (strict schemas); mark/rewind restore the state;
// the trie's walk finds exactly the tokens a byte-by-byte check finds; the compiler's refusals
// name the keyword's path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "text/json_matcher.hpp"
#include "text/json_schema.hpp"
#include "text/token_trie.hpp"
#include "text/tokenizer.hpp"
#include "util/json_value.hpp"

using namespace deltafin;

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

struct Fed {
  size_t taken = 0;  // bytes taken before the first refusal (all: none refused)
  bool complete = false, closed = false;
};

Fed feed(JsonMatcher& m, const std::string& text) {
  Fed r;
  for (unsigned char c : text) {
    if (!m.push(c)) return r;
    ++r.taken;
  }
  r.complete = m.complete();
  r.closed = m.closed();
  return r;
}

std::shared_ptr<const CompiledSchema> compile(const std::string& schema, SchemaMode mode = SchemaMode::kStrict) {
  return std::make_shared<const CompiledSchema>(compile_json_schema(parse_json(schema), mode));
}

}  // namespace

TEST_CASE("structured: the matcher agrees with Python's json and jsonschema on the fixture corpus", "[structured]") {
  const std::filesystem::path dir = test::fixture("structured");
  size_t files = 0, valid = 0, refused = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const JsonValue corpus = parse_json(read_text(entry.path()));
    const bool strict = corpus.find("mode")->as_string() == "strict";
    const auto schema = std::make_shared<const CompiledSchema>(
        compile_json_schema(*corpus.find("schema"), strict ? SchemaMode::kStrict : SchemaMode::kLenient));
    for (const JsonValue& doc : corpus.find("documents")->items()) {
      const std::string text = doc.find("text") ? doc.find("text")->as_string() : from_hex(doc.find("hex")->as_string());
      const bool is_valid = doc.find("valid")->as_bool();
      const bool outside = doc.find("outside_subset") != nullptr;
      JsonMatcher m(schema);
      const Fed r = feed(m, text);
      INFO(entry.path().filename().string() << ": " << text);
      if (is_valid && !outside) {
        ++valid;
        CHECK(r.taken == text.size());
        CHECK(r.complete);
        CHECK(r.closed);
      } else if (strict || outside) {
        ++refused;
        CHECK_FALSE((r.taken == text.size() && r.complete));
      }
    }
  }
  CHECK(files >= 8);
  CHECK(valid >= 60);
  CHECK(refused >= 60);
}

TEST_CASE("structured: rewinding to a mark restores the matcher exactly", "[structured]") {
  const auto schema = std::make_shared<const CompiledSchema>(compile_json_schema(
      *parse_json(read_text(test::fixture("structured/any_of.json"))).find("schema"), SchemaMode::kStrict));
  const std::string doc = R"({"value": "ab", "shape": {"h": 1, "w": 2.5e3, "kind": "rect"}})";
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    JsonMatcher m(schema);
    for (size_t i = 0; i < doc.size(); ++i) {
      // A detour of random bytes, then back: the real document must still go through.
      const size_t mark = m.mark();
      for (int k = 0; k < 4; ++k) m.push(static_cast<uint8_t>(" \"{}[],:0123456789aehknrstuvw-.\\"[rng() % 33]));
      m.rewind(mark);
      REQUIRE(m.mark() == mark);
      REQUIRE(m.push(static_cast<uint8_t>(doc[i])));
    }
    CHECK(m.closed());
  }
}

TEST_CASE("structured: the trie's walk finds exactly the tokens the matcher takes whole", "[structured]") {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\":", "\": \"", "name", "\"name\"", "\"age\":", "true", "tr", "null", "12", "1.5", ", ",
                        "\"}", "}}", "\\u00", "é", "漢字", "  ", "\n  ", "\"a", "red\"", "[1,", "\"\"", "", "ab", "abc",
                        "abcd", "abcde", "ab\"", "a\n", "\xe6\xbc", "\xa2", "x\x7f", "nam", "zz", "zzz", "é\"", "\"x\":"})
    tokens.push_back(t);
  const TokenTrie trie(tokens);
  const auto schema = compile(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer"},"c":{"enum":["red",1.5,null]},
          "d":{"anyOf":[{"type":"string","maxLength":1},{"type":"string","maxLength":3}]}},"required":["name"]})");
  const std::string doc = R"({"name": "漢字é\u00e9ab", "age": 12, "c": "red", "d": "abc", "free": "x", "zzz": 1})";
  JsonMatcher m(schema);
  std::vector<uint8_t> allowed;
  for (size_t i = 0; i <= doc.size(); ++i) {
    trie.allowed(m, allowed);
    for (size_t id = 0; id < tokens.size(); ++id) {
      bool takes = !tokens[id].empty();
      const size_t mark = m.mark();
      for (unsigned char c : tokens[id]) takes = takes && m.push(c);
      m.rewind(mark);
      INFO("after " << doc.substr(0, i) << " token " << tokens[id]);
      CHECK(static_cast<bool>(allowed[id]) == takes);
    }
    if (i < doc.size()) REQUIRE(m.push(static_cast<uint8_t>(doc[i])));
  }
  CHECK(m.closed());
}

TEST_CASE("structured: on the bundled vocabulary the trie's walk equals a token-by-token check", "[structured]") {
  const auto tokenizer = load_tokenizer(test::fixtures_dir() + "/../../models/default");
  const TokenTrie trie(*tokenizer);
  const auto schema = compile(
      R"({"type":"object","properties":{"text":{"type":"string","maxLength":9},"free":{"type":"string"},
          "n":{"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]}},"required":["text"]})");
  const std::string doc = "{\"text\": \"def x(é\\n\", \"free\": \"  return self\\t\u6f22\\u00e9\", \"n\": \"ab\", \"k\": [1, {}]}";
  JsonMatcher m(schema);
  std::vector<uint8_t> allowed;
  size_t mismatches = 0;
  for (size_t i = 0; i <= doc.size(); ++i) {
    trie.allowed(m, allowed);
    for (int32_t id = 0; id < trie.vocab_size(); ++id) {
      const std::string& bytes = trie.bytes(id);
      bool takes = !bytes.empty();
      const size_t mark = m.mark();
      for (unsigned char c : bytes) takes = takes && m.push(c);
      m.rewind(mark);
      mismatches += static_cast<bool>(allowed[static_cast<size_t>(id)]) != takes;
    }
    if (i < doc.size()) REQUIRE(m.push(static_cast<uint8_t>(doc[i])));
  }
  CHECK(m.closed());
  CHECK(mismatches == 0);
}

TEST_CASE("structured: the schema compiler refuses what it does not support, naming the path", "[structured]") {
  auto path_of = [](const std::string& schema, SchemaMode mode = SchemaMode::kStrict) -> std::string {
    try {
      compile_json_schema(parse_json(schema), mode);
    } catch (const SchemaError& e) {
      return e.path;
    }
    return "(compiled)";
  };
  CHECK(path_of(R"({"type":"object","properties":{"age":{"type":"integer","minimum":0}}})") == "properties.age.minimum");
  CHECK(path_of(R"({"type":"object","properties":{"age":{"type":"integer","minimum":0}}})", SchemaMode::kLenient) == "(compiled)");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string","format":"date"}]}}})") == "properties.a.anyOf.0.format");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"}],"type":"string"}}})") == "properties.a.type");
  CHECK(path_of(R"({"type":"object","patternProperties":{}})") == "patternProperties");
  CHECK(path_of(R"({"type":"object","items":[{"type":"string"}]})") == "items");
  CHECK(path_of(R"({"type":"array"})") == "type");
  CHECK(path_of(R"({"type":"objet"})") == "type");
  CHECK(path_of(R"({"type":"object","required":["a"],"additionalProperties":false})") == "required");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"enum":[]}}})") == "properties.a.enum");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"type":"string","enum":[1]}}})") == "properties.a.enum");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"$ref":"other.json#/x"}}})") == "properties.a.$ref");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}})") == "properties.a.$ref");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"type":"string","minLength":3,"maxLength":2}}})") == "properties.a.minLength");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"type":"string","maxLength":-1}}})") == "properties.a.maxLength");
  CHECK(path_of(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/B"}},"$defs":{"B":{"not":{}}}})") == "$defs.B.not");
  CHECK(path_of(R"([])") == "");
  CHECK(path_of(R"({"type":"object","title":"t","description":"d","default":{},"examples":[],"$comment":"c"})") == "(compiled)");
  // A schema nested past the limit is refused, not a stack overflow.
  std::string deep = R"({"type":"object","properties":{"a":)";
  for (int i = 0; i < 100; ++i) deep += R"({"type":"array","items":)";
  deep += "true" + std::string(100, '}') + "}}";
  CHECK(path_of(deep).rfind("properties.a.items.items", 0) == 0);
}

TEST_CASE("structured: json_object takes any object and nothing after it", "[structured]") {
  const auto schema = std::make_shared<const CompiledSchema>(json_object_schema());
  JsonMatcher m(schema);
  CHECK_FALSE(m.push('['));
  CHECK_FALSE(m.complete());
  const Fed r = feed(m, R"({"a": [1, -2.5e+3, "x\n", null, true, {"b": {}}], "": false})");
  CHECK(r.closed);
  CHECK_FALSE(m.push(' '));
  CHECK_FALSE(m.push('{'));
}
