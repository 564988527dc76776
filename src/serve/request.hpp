// The bodies of POST /v1/chat/completions and /v1/completions, parsed and type-checked. Fields
// this server does not use are ignored, as OpenAI's own server ignores unknown ones; a field
// with the wrong type or range, n other than 1, or a request for log probabilities, is an
// ApiError 400 naming it. Integers are int64 JSON integers within their field's range (past
// INT64_MAX, fractional or exponent forms are refused, never wrapped or rounded).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "decode/sampler.hpp"
#include "text/chat_format.hpp"

namespace deltafin::serve {

struct CompletionRequest {
  bool chat = false;                  // chat.completions (messages) or completions (prompt)
  std::vector<ChatMessage> messages;  // chat
  std::string prompt;                 // completions
  std::string model;                  // "" when absent
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens
  std::string max_tokens_field;       // which of the two gave it (an error names it)
  SamplerOptions sampler;             // temperature (default 1 as OpenAI's), top_p, seed
  std::vector<std::string> stops;
};

CompletionRequest parse_chat_request(std::string_view body);
CompletionRequest parse_completion_request(std::string_view body);

}  // namespace deltafin::serve
