// What one chat request asks of the model's chat format: the template's options (tools,
// tool_choice, response_format, thinking), the stop that keeps tool_choice "none" from calling a
// tool (generation ends where the model opens a tool-call section), and the parser that splits
// the reply into reasoning, content and tool calls. A request the format cannot serve (tools on
// a model whose chat format has no tool calls) is an ApiError 400 naming the field.
#pragma once

#include <string>
#include <vector>

#include "serve/request.hpp"
#include "text/chat_format.hpp"
#include "text/reply_parser.hpp"

namespace deltafin::serve {

class ChatTurn {
 public:
  ChatTurn(const CompletionRequest& request, ChatStyle style);

  const ChatOptions& options() const { return options_; }
  // Stop strings the turn adds to the request's.
  const std::vector<std::string>& stops() const { return stops_; }
  ReplyParser parser() const;
  // The finish reason of a reply that ended with "stop": "tool_calls" when it calls tools.
  static std::string finish_reason(const std::string& generation_finish, const Reply& reply);

 private:
  ChatStyle style_;
  bool inline_reasoning_;
  ChatOptions options_;
  std::vector<std::string> stops_;
};

}  // namespace deltafin::serve
