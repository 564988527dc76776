// One generation on the server's engine, by the loop `deltafin run` uses (decode/generation.hpp):
// the prompt prefilled (keeping a held session's common prefix, session_cache.hpp), the first token from the
// prefill's logits, then speculative steps (greedy requests only: the drafter was built for
// greedy decoding; sampled requests decode plainly), ending at a stop token, a stop string or
// max_tokens. Text goes out UTF-8-safe, with text that could start a stop string held back, as
// run prints it. The sink and the stop predicate are the loop's (TextSink, StopNow).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/prefix_cache.hpp"
#include "decode/generation.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "decode/token_constraint.hpp"
#include "serve/session_cache.hpp"
#include "text/chat_format.hpp"
#include "text/token_trie.hpp"
#include "text/tokenizer.hpp"

namespace deltafin::serve {

struct GenerationInput {
  std::vector<int32_t> prompt;
  SamplerOptions sampler;
  int64_t max_tokens = 0;
  std::vector<std::string> stops;
  bool chat = false;  // chat requests also stop at the chat format's end-of-turn tokens
  TokenConstraint* constraint = nullptr;  // structured output or a forced tool call (decode/token_constraint.hpp)
};

struct GenerationResult {
  std::string text;
  std::vector<int32_t> ids;        // the generated ids (what the receipt hashes)
  std::string finish_reason;       // "stop", "length", or "cancelled" (stop_now said so)
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;       // prompt positions kept from a held session or the prefix cache
  double first_token_seconds = 0;  // from the start of prefill to the first token
  double decode_seconds = 0;
  int64_t decode_passes = 0;
  double constraint_seconds = 0;   // masking and accepting under a constraint (structured output, forced tool calls)
  int64_t constraint_steps = 0;    // tokens decoded under it
};

class Generator {
 public:
  // drafter may be nullptr (a greedy one: sampled requests decode without it). reuse_sessions
  // false: no prefix is kept between requests. The held sessions share the engine's planned
  // state (ModelSummary::planned_state_bytes).
  // prefix_cache: --prefix-cache (nullptr: none), over `engine`.
  Generator(const std::string& model_dir, std::unique_ptr<Engine> engine, std::unique_ptr<Drafter> drafter, const SpeculativeOptions& speculative,
            int64_t chunk, bool reuse_sessions, std::unique_ptr<PrefixCache> prefix_cache = nullptr);

  std::vector<int32_t> chat_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
  std::vector<int32_t> text_prompt(const std::string& text) const;

  GenerationResult generate(const GenerationInput& input, const TextSink& sink, const StopNow& stop_now);

  const Engine& engine() const { return *engine_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The tokens that end a generation: the model's eos, and for chat the format's end-of-turn tokens.
  std::vector<int32_t> end_ids(bool chat) const;
  // The vocabulary's byte trie for constrained decoding, made on first use (by the request that
  // holds the engine).
  const TokenTrie& token_trie();
  ChatStyle chat_style() const { return chat_style_; }
  SessionCacheStats session_stats() const { return sessions_.stats(); }

 private:
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Drafter> drafter_;
  SpeculativeOptions speculative_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatStyle chat_style_;
  std::vector<int32_t> chat_stop_ids_;
  std::unique_ptr<TokenTrie> token_trie_;
  int64_t chunk_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // (before sessions_, which writes to it until destroyed)
  SessionCache sessions_;
};

}  // namespace deltafin::serve
