// Tests of constrained sampling for structured output (src/decode/json_constraint.*,
// matcher_mask.*, the constraint path of run_generation): generation on random logits (many
// seeds, the bundled model's vocabulary) always ends with a document that Python's json module
// and python3-jsonschema accept (tests/fixtures/structured/validate_documents.py, run on the
// documents written to a temporary file); a real generation on the bundled model gives valid
// JSON; a constraint that leaves no token ends the generation; without end ids it ends when the
// document closes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/generation.hpp"
#include "decode/json_constraint.hpp"
#include "random_logits_session.hpp"
#include "test_util.hpp"
#include "text/chat_format.hpp"
#include "text/json_schema.hpp"
#include "text/token_trie.hpp"
#include "util/json_value.hpp"

using namespace deltafin;
using deltafin::test::RandomLogitsSession;

namespace {

const std::string kModel = test::fixtures_dir() + "/../../models/default";


const Tokenizer& bundled_tokenizer() {
  static const std::unique_ptr<Tokenizer> t = load_tokenizer(kModel);
  return *t;
}

const TokenTrie& bundled_trie() {
  static const TokenTrie trie(bundled_tokenizer());
  return trie;
}

// Runs the documents through the Python reference; true when every one is valid.
bool python_accepts(const std::vector<std::pair<std::string, std::string>>& schema_and_documents) {
  const auto file = std::filesystem::temp_directory_path() / ("deltafin-structured-" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(file, std::ios::binary);
    for (const auto& [schema, doc] : schema_and_documents)
      out << "{\"schema\": " << write_json(parse_json(schema)) << ", \"document\": " << python_json_string(doc) << "}\n";
  }
  const std::string command = "python3 " + test::fixture("structured/validate_documents.py") + " " + file.string();
  const int status = std::system(command.c_str());
  std::filesystem::remove(file);
  return status == 0;
}

const char* const kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"enum":["a","b","c d",7]},"maxItems":4},"ok":{"type":"boolean"},
        "score":{"type":["number","null"]}},"required":["name","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"value":{"anyOf":[{"type":"integer"},{"type":"string","maxLength":3},{"type":"null"}]},
        "shape":{"anyOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"],"additionalProperties":false},
        {"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"number"},"h":{"type":"number"}},"required":["kind","w","h"],"additionalProperties":false}]}},
        "required":["shape"],"additionalProperties":false})",
    R"({"$defs":{"Node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/Node"},{"type":"null"}]}},
        "required":["v","next"],"additionalProperties":false}},"type":"object","properties":{"list":{"$ref":"#/$defs/Node"},
        "code":{"type":"string","minLength":2,"maxLength":5},"extra":{"type":"object","additionalProperties":{"type":"boolean"}}},
        "required":["list","code"],"additionalProperties":false})",
};

GenerationOutcome generate(Session& session, TokenConstraint& constraint, std::vector<int32_t> stop_ids, uint64_t seed,
                           int64_t max_tokens = 2000) {
  Sampler sampler(SamplerOptions{.temperature = 1.0f, .seed = seed});
  const std::vector<int32_t> prompt{1, 2, 3};
  GenerationRequest request;
  request.prompt = prompt;
  request.chunk = 3;
  request.max_tokens = max_tokens;
  request.stop_ids = std::move(stop_ids);
  request.tokenizer = &bundled_tokenizer();
  request.constraint = &constraint;
  GenerationHooks hooks;
  hooks.text = [](std::string_view) { return true; };
  return run_generation(session, bundled_tokenizer().vocab_size(), sampler, request, hooks);
}

}  // namespace

TEST_CASE("structured: generation on random logits always ends with a document the Python reference accepts", "[structured]") {
  std::vector<std::pair<std::string, std::string>> documents;
  for (const char* text : kSchemas) {
    const JsonValue parsed = parse_json(text);
    const auto schema = std::make_shared<const CompiledSchema>(compile_json_schema(parsed, SchemaMode::kStrict));
    const std::string schema_text = write_json(parsed);
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      RandomLogitsSession session(bundled_tokenizer().vocab_size(), seed);
      JsonConstraint constraint(schema, bundled_trie(), {0});
      const GenerationOutcome out = generate(session, constraint, {0}, seed);
      const std::string doc = bundled_tokenizer().decode(out.generated);
      INFO("seed " << seed << ": " << doc);
      REQUIRE(out.finish == FinishReason::kStop);
      CHECK(constraint.matcher().closed());
      CHECK(out.constraint_steps == out.generated.size() + 1);  // the end token's step too
      CHECK(out.speculative.steps == out.generated.size());
      documents.emplace_back(schema_text, doc);
    }
  }
  CHECK(python_accepts(documents));
}

TEST_CASE("structured: without end ids the generation ends as the document closes", "[structured]") {
  const auto schema = std::make_shared<const CompiledSchema>(json_object_schema());
  std::vector<std::pair<std::string, std::string>> documents;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    RandomLogitsSession session(bundled_tokenizer().vocab_size(), seed);
    JsonConstraint constraint(schema, bundled_trie(), {});
    const GenerationOutcome out = generate(session, constraint, {}, seed, 4000);
    if (out.finish == FinishReason::kLength) continue;  // an unbounded object may run past max_tokens
    CHECK(out.finish == FinishReason::kStop);
    CHECK(constraint.finished());
    documents.emplace_back("{\"type\": \"object\"}", bundled_tokenizer().decode(out.generated));
  }
  CHECK(documents.size() >= 5);
  CHECK(python_accepts(documents));
}

TEST_CASE("structured: a constraint that leaves no token ends the generation", "[structured]") {
  std::vector<std::string> tokens(static_cast<size_t>(bundled_tokenizer().vocab_size()));
  tokens[5].push_back('[');  // no token can open an object
  const TokenTrie trie(tokens);
  JsonConstraint constraint(std::make_shared<const CompiledSchema>(json_object_schema()), trie, {0});
  RandomLogitsSession session(bundled_tokenizer().vocab_size(), 1);
  const GenerationOutcome out = generate(session, constraint, {0}, 1);
  CHECK(out.finish == FinishReason::kStop);
  CHECK(out.generated.empty());
  CHECK_THROWS_AS(constraint.accept(5), Error);
}

TEST_CASE("structured: the bundled model generates valid JSON under a schema", "[structured]") {
  const Tokenizer& tok = bundled_tokenizer();
  REQUIRE(detect_chat_style(tok) == ChatStyle::Plain);
  const char* schema_text =
      R"({"type":"object","properties":{"title":{"type":"string","maxLength":20},"year":{"type":"integer"},
          "genre":{"enum":["drama","comedy","news"]},"ok":{"type":"boolean"}},"required":["title","year","genre"],
          "additionalProperties":false})";
  const auto schema = std::make_shared<const CompiledSchema>(compile_json_schema(parse_json(schema_text), SchemaMode::kStrict));
  EngineOptions o;
  o.model_dir = kModel;
  o.threads = 2;
  auto engine = Engine::open(o);
  std::vector<ChatMessage> messages(1);
  messages[0].role = std::string("user");
  messages[0].content = std::string("Describe a film as JSON.");
  const std::vector<int32_t> prompt = encode_segments(tok, render_chat(ChatStyle::Plain, messages, true));
  std::vector<std::pair<std::string, std::string>> documents;
  for (float temperature : {0.0f, 0.8f}) {
    auto session = engine->new_session();
    JsonConstraint constraint(schema, bundled_trie(), chat_stop_ids(ChatStyle::Plain, tok));
    Sampler sampler(SamplerOptions{.temperature = temperature, .seed = 3});
    GenerationRequest request;
    request.prompt = prompt;
    request.chunk = 64;
    request.max_tokens = 400;
    request.stop_ids = chat_stop_ids(ChatStyle::Plain, tok);
    request.tokenizer = &tok;
    request.constraint = &constraint;
    std::string streamed;
    GenerationHooks hooks;
    hooks.text = [&](std::string_view text) { return streamed += text, true; };
    const GenerationOutcome out = run_generation(*session, engine->summary().vocab_size, sampler, request, hooks);
    INFO("temperature " << temperature << ": " << streamed);
    CHECK(out.finish == FinishReason::kStop);
    CHECK(constraint.matcher().closed());
    CHECK(streamed == tok.decode(out.generated));
    CHECK(out.constraint_seconds > 0);
    documents.emplace_back(schema_text, streamed);
  }
  CHECK(python_accepts(documents));
}
