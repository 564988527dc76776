// What one chat request asks of the model's chat format: the template's options (tools,
// tool_choice, response_format, thinking), the stop that keeps tool_choice "none" from calling a
// tool (generation ends where the model opens a tool-call section), and the parser that splits
// the reply into reasoning, content and tool calls, and the constraint a forced tool call
// (tool_choice "required" or a named function) or structured output (response_format) decodes
// under (decode/reply_programs.hpp). A request the format cannot serve (tools on a model whose
// chat format has no tool calls, a schema keyword outside the supported subset) is an ApiError
// 400 naming the field.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "decode/reply_programs.hpp"
#include "decode/token_constraint.hpp"
#include "text/token_trie.hpp"
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
  bool constrained() const { return !forced_tools_.empty() || response_schema_ != nullptr; }
  // The constraint the reply decodes under; nullptr when the request asks for none. end_ids: the
  // format's end-of-turn tokens.
  std::unique_ptr<TokenConstraint> constraint(const Tokenizer& tokenizer, const TokenTrie& trie,
                                              const std::vector<int32_t>& end_ids) const;
  // The finish reason of a reply that ended with "stop": "tool_calls" when it calls tools.
  static std::string finish_reason(const std::string& generation_finish, const Reply& reply);

 private:
  ChatStyle style_;
  bool inline_reasoning_;
  ChatOptions options_;
  std::vector<std::string> stops_;
  std::vector<ReplyTool> forced_tools_;  // tool_choice "required" or a named function: the tools it may call
  bool parallel_ = true;
  std::shared_ptr<const CompiledSchema> response_schema_;  // response_format json_schema or json_object
};

}  // namespace deltafin::serve
