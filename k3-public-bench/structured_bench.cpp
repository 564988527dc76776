// Structured output's masking cost (docs/structured-output.md): how long a constrained step
// spends in the JsonConstraint (the vocabulary trie walked under the JSON matcher, then the
// token accepted) against the decode time per token, on a model; and the masking time alone on a
// tokenizer's vocabulary (a large one: DeepSeek-V3's ~128k tokens), over a generation on random
// logits and in the states that cost most (inside a string, where nearly every token continues).
// Medians of several runs.
// Usage: structured_bench RUNS model:MODEL_DIR | vocab:TOKENIZER_DIR ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/generation.hpp"
#include "decode/json_constraint.hpp"
#include "random_logits_session.hpp"
#include "text/chat_format.hpp"
#include "text/json_schema.hpp"
#include "text/token_trie.hpp"
#include "util/error.hpp"
#include "util/json_value.hpp"

using namespace deltafin;
using deltafin::test::RandomLogitsSession;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema =
    R"({"type":"object","properties":{"title":{"type":"string","maxLength":40},"year":{"type":"integer"},
        "genre":{"enum":["drama","comedy","news","documentary"]},"rating":{"type":["number","null"]},
        "cast":{"type":"array","items":{"type":"string","maxLength":30},"maxItems":4},
        "summary":{"type":"string","maxLength":300}},"required":["title","year","genre","summary"],"additionalProperties":false})";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::shared_ptr<const CompiledSchema> film_schema() {
  return std::make_shared<const CompiledSchema>(compile_json_schema(parse_json(kSchema), SchemaMode::kStrict));
}


GenerationOutcome generate(Session& session, int64_t vocab, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                           TokenConstraint* constraint, std::vector<int32_t> stops, int64_t max_tokens, float temperature) {
  Sampler sampler(SamplerOptions{.temperature = temperature, .seed = 1});
  GenerationRequest request;
  request.prompt = prompt;
  request.chunk = 64;
  request.max_tokens = max_tokens;
  request.stop_ids = std::move(stops);
  request.tokenizer = &tok;
  request.constraint = constraint;
  GenerationHooks hooks;
  hooks.text = [](std::string_view) { return true; };
  return run_generation(session, vocab, sampler, request, hooks);
}

void bench_model(const std::string& dir, int runs) {
  EngineOptions o;
  o.model_dir = dir;
  auto engine = Engine::open(o);
  const auto tok = load_tokenizer(dir);
  const TokenTrie trie(*tok);
  const ChatStyle style = detect_chat_style(*tok);
  std::vector<ChatMessage> messages(1);
  messages[0].role = std::string("user");
  messages[0].content = std::string("Describe a film as JSON.");
  const std::vector<int32_t> prompt = encode_segments(*tok, render_chat(style, messages, true));
  const auto schema = film_schema();
  const int64_t vocab = engine->summary().vocab_size;
  std::vector<double> plain_decode, decode, mask, ratio;
  size_t tokens = 0;
  for (int r = 0; r < runs; ++r) {
    auto s1 = engine->new_session();
    const GenerationOutcome free = generate(*s1, vocab, *tok, prompt, nullptr, {}, 64, 0.0f);
    plain_decode.push_back(free.speculative.target_seconds / static_cast<double>(free.speculative.steps));
    auto s2 = engine->new_session();
    JsonConstraint constraint(schema, trie, chat_stop_ids(style, *tok));
    const GenerationOutcome out = generate(*s2, vocab, *tok, prompt, &constraint, chat_stop_ids(style, *tok), 400, 0.0f);
    tokens = out.constraint_steps;
    decode.push_back(out.speculative.target_seconds / static_cast<double>(out.speculative.steps));
    mask.push_back(out.constraint_seconds / static_cast<double>(out.constraint_steps));
    ratio.push_back(mask.back() / decode.back());
  }
  std::printf("| %s | %s | %d | %zu | %.3f | %.3f | %.3f | %.2f |\n", dir.c_str(), engine->summary().backend.c_str(),
              tok->vocab_size(), tokens, median(plain_decode) * 1e3, median(decode) * 1e3, median(mask) * 1e3, median(ratio));
}

void bench_vocab(const std::string& dir, int runs) {
  const auto tok = load_tokenizer(dir);
  const auto t0 = Clock::now();
  const TokenTrie trie(*tok);
  const double build = seconds_since(t0);
  const auto schema = film_schema();
  std::vector<double> walk, in_string, at_key;
  std::vector<uint8_t> allowed;
  size_t steps = 0, string_allowed = 0;
  for (int r = 0; r < runs; ++r) {
    RandomLogitsSession session(tok->vocab_size(), static_cast<uint64_t>(r + 1));
    JsonConstraint constraint(schema, trie, {});
    const GenerationOutcome out = generate(session, tok->vocab_size(), *tok, {1, 2, 3}, &constraint, {}, 2000, 1.0f);
    steps += out.constraint_steps;
    walk.push_back(out.constraint_seconds / static_cast<double>(out.constraint_steps));
    // Fixed states: inside a string value, and where a key may start.
    for (const bool string : {true, false}) {
      JsonMatcher m(schema);
      for (const char* p = string ? R"({"title": "x", "summary": "Once upon a)" : R"({"title": "x", )"; *p; ++p)
        m.push(static_cast<uint8_t>(*p));
      const auto t1 = Clock::now();
      trie.allowed(m, allowed);
      (string ? in_string : at_key).push_back(seconds_since(t1));
      if (string) string_allowed = static_cast<size_t>(std::count(allowed.begin(), allowed.end(), 1));
    }
  }
  std::printf("| %s | %d | %zu | %.0f | %zu | %.3f | %.3f (%zu allowed) | %.3f |\n", dir.c_str(), tok->vocab_size(), trie.nodes(),
              build * 1e3, steps / static_cast<size_t>(runs), median(walk) * 1e3, median(in_string) * 1e3, string_allowed, median(at_key) * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: structured_bench RUNS model:MODEL_DIR | vocab:TOKENIZER_DIR ...\n");
    return 2;
  }
  try {
    const int runs = std::max(1, std::atoi(argv[1]));
    bool model_header = false, vocab_header = false;
    for (int a = 2; a < argc; ++a) {
      const std::string spec = argv[a];
      if (spec.rfind("model:", 0) == 0) {
        if (!model_header)
          std::printf("| model | backend | vocab | constrained steps | decode ms/token (free) | decode ms/token (constrained) | "
                      "mask ms/token | mask / decode |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        model_header = true;
        bench_model(spec.substr(6), runs);
      } else if (spec.rfind("vocab:", 0) == 0) {
        if (!vocab_header)
          std::printf("\n| tokenizer | vocab | trie nodes | trie build ms | steps (mean) | mask ms/step (random walk) | "
                      "mask ms in a string | mask ms at a key |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        vocab_header = true;
        bench_vocab(spec.substr(6), runs);
      } else {
        fail("unknown spec '{}' (model:DIR or vocab:DIR)", spec);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "structured_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
