// The one generation loop of `deltafin run` and `deltafin serve`: the prompt prefilled in passes
// of `chunk` positions (the stop predicate checked before each), the first token from the
// prefill's logits, then speculative steps (the target checks every guess, so the tokens are
// plain decoding's), ending at a stop token, a stop string or max_tokens, or when the stop
// predicate says so or the text sink fails ("cancelled"). The text goes out UTF-8-safe, with
// text that could start a stop string held back until it is decided. With a TokenConstraint
// (structured output) it decodes plainly: each step's logits masked by the constraint, then
// sampled and accepted; the constraint finished ends the generation ("stop").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "decode/token_constraint.hpp"
#include "text/tokenizer.hpp"

namespace deltafin {

// Called with text as it becomes final; false when it can no longer be delivered (the loop then
// stops before its next step: "cancelled").
using TextSink = std::function<bool(std::string_view text)>;
// Checked before every prefill pass, before the first token and before every step: true stops
// the generation ("cancelled").
using StopNow = std::function<bool()>;

struct GenerationRequest {
  std::span<const int32_t> prompt;
  int64_t held = 0;   // prompt positions the session holds already (a kept prefix); the rest is prefilled
  int64_t chunk = 1;  // positions per prefill pass
  int64_t max_tokens = 0;
  std::vector<int32_t> stop_ids;         // tokens that end the generation (not part of it)
  std::vector<std::string> stops;        // stop strings (need the tokenizer)
  const Tokenizer* tokenizer = nullptr;  // nullptr: no text at all (ids only, no stop strings)
  Drafter* drafter = nullptr;            // nullptr: plain decoding
  SpeculativeOptions speculative;
  // nullptr: unconstrained. Else plain decoding (the drafter unused), every token one the
  // constraint left; should it leave none, the generation ends ("stop").
  TokenConstraint* constraint = nullptr;
};

struct GenerationHooks {
  TextSink text;                                    // the text (with a tokenizer)
  std::function<void(int32_t token)> token;         // each generated token, after its stop checks (optional)
  StopNow stop_now;                                 // optional
  std::function<void(int64_t position)> prefilled;  // after each prefill pass: the positions held (optional)
  std::function<void()> decode_start;               // once, between the prefill and the first token (optional)
};

enum class FinishReason { kLength, kStop, kCancelled };

struct GenerationOutcome {
  using Clock = std::chrono::steady_clock;
  std::vector<int32_t> generated;  // the token that completed a stop string included, a stop token not
  // The prompt, the generated tokens and those a step committed past the one that ended the
  // generation: the session holds all of them but the last.
  std::vector<int32_t> committed;
  int64_t prefilled = 0;  // positions the prefill appended (fewer than asked when cancelled)
  FinishReason finish = FinishReason::kLength;
  bool sampled_first = false;        // a first token was sampled from the prefill's logits
  Clock::time_point first_token_at;  // when it was sampled
  Clock::time_point decode_from;     // after it was taken (without one: after the prefill)
  SpeculativeStats speculative;      // the decoder's: steps are the target passes of the decode
  double constraint_seconds = 0;     // in the constraint's mask() and accept(), all steps
  uint64_t constraint_steps = 0;     // masked steps (the first token's included)
};

// The prefill stage of the loop: appends prompt[from ..] in passes of `chunk` positions, calling
// `prefilled` after each; empty logits when stop_now stopped it before a pass. `appended`: the
// positions it appended.
std::vector<float> prefill_prompt(Session& session, std::span<const int32_t> prompt, int64_t from, int64_t chunk,
                                  const StopNow& stop_now, const std::function<void(int64_t)>& prefilled, int64_t& appended);

// One generation on `session`, which holds prompt[0 .. held) (and nothing after it).
GenerationOutcome run_generation(Session& session, int64_t vocab, Sampler& sampler, const GenerationRequest& request,
                                 const GenerationHooks& hooks);

}  // namespace deltafin
