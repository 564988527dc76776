// The bodies of POST /v1/chat/completions and /v1/completions, parsed and type-checked. Fields
// this server does not use are ignored, as OpenAI's own server ignores unknown ones; a field
// with the wrong type or range, n other than 1, or a request for log probabilities, is an
// ApiError 400 naming it. Integers are int64 JSON integers within their field's range (past
// INT64_MAX, fractional or exponent forms are refused, never wrapped or rounded). The chat
// request's tools, tool_choice, tool messages and response_format are checked in
// chat_request.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "decode/sampler.hpp"
#include "text/chat_format.hpp"
#include "util/json_value.hpp"

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

  // chat only
  std::optional<JsonValue> tools;     // the `tools` array as the client wrote it (what the templates render)
  std::string tool_choice = "auto";   // "auto", "none", "required" or "function" (one named function)
  std::string tool_choice_name;       // "function": its name
  bool parallel_tool_calls = true;
  std::string response_format = "text";  // "text", "json_object" or "json_schema"
  std::optional<JsonValue> response_schema;  // json_schema's schema
  bool inline_reasoning = false;      // reasoning_format "inline": the reasoning stays in content
  bool thinking = true;               // chat_template_kwargs.thinking (Kimi K3)

  // The function `tools` declares by this name (its {"name", "parameters", ...} object), or nullptr.
  const JsonValue* tool_function(const std::string& name) const;
};

CompletionRequest parse_chat_request(std::string_view body);
CompletionRequest parse_completion_request(std::string_view body);

}  // namespace deltafin::serve
