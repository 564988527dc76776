// A chat request's format-specific parts (see chat_turn.hpp).
#include "serve/chat_turn.hpp"

#include <fmt/format.h>

#include "serve/api_error.hpp"

namespace deltafin::serve {
namespace {

// The text that opens a tool-call section in each format.
std::string tool_calls_start(ChatStyle style) {
  switch (style) {
    case ChatStyle::KimiK2:
    case ChatStyle::KimiK2Thinking: return "<|tool_calls_section_begin|>";
    case ChatStyle::KimiK3: return "<|open|>tools<|sep|>";
    case ChatStyle::DeepSeekV3: return "<｜tool▁calls▁begin｜>";
    default: return "";
  }
}

}  // namespace

ChatTurn::ChatTurn(const CompletionRequest& request, ChatStyle style) : style_(style), inline_reasoning_(request.inline_reasoning) {
  const bool has_tools = request.tools.has_value();
  if (style == ChatStyle::Plain && (has_tools || request.tool_choice != "auto"))
    throw ApiError(400, fmt::format("this model's chat format ({}) has no tool calls", chat_style_name(style)),
                   has_tools ? "tools" : "tool_choice");
  if (style == ChatStyle::Plain)
    for (size_t i = 0; i < request.messages.size(); ++i)
      if (request.messages[i].role == "tool" || !request.messages[i].tool_calls.empty())
        throw ApiError(400, fmt::format("this model's chat format ({}) has no tool calls", chat_style_name(style)),
                       fmt::format("messages[{}]", i));
  options_.tools = has_tools ? &*request.tools : nullptr;
  options_.tool_choice = request.tool_choice == "function" ? request.tool_choice_name : request.tool_choice;
  options_.response_format = request.response_format == "text" ? "" : request.response_format;
  options_.response_schema = request.response_schema ? &*request.response_schema : nullptr;
  options_.thinking = request.thinking;
  if (has_tools && request.tool_choice == "none") stops_.push_back(tool_calls_start(style));
}

ReplyParser ChatTurn::parser() const {
  return ReplyParser(style_, style_ == ChatStyle::KimiK3 && options_.thinking, inline_reasoning_);
}

std::string ChatTurn::finish_reason(const std::string& generation_finish, const Reply& reply) {
  return generation_finish == "stop" && !reply.tool_calls.empty() ? "tool_calls" : generation_finish;
}

}  // namespace deltafin::serve
