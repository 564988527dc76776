// The reply programs (reply_constraint.hpp) of each chat family (docs/chat-formats.md):
//   a forced tool call (tool_choice "required", or one named function): the reply is a tool-call
//   section whose calls name the allowed tools and whose arguments follow each tool's parameters
//   (compiled leniently: keywords outside the supported subset are not enforced); one call, or
//   several when parallel_tool_calls allows; reasoning first where the family thinks (Kimi K3's
//   response block, before its tools block, stays empty: a forced call has no answer);
//   structured output (response_format): one JSON document under the schema, after the reasoning
//   where the family thinks (Kimi K3 writes it in the response block).
// Throws deltafin::Error when the vocabulary lacks a control token the format needs.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "decode/reply_constraint.hpp"
#include "text/chat_format.hpp"
#include "text/json_schema.hpp"
#include "text/tokenizer.hpp"

namespace deltafin {

struct ReplyTool {
  std::string name;
  std::shared_ptr<const CompiledSchema> parameters;
};

// thinking: the prompt opened Kimi K3's think block (else its response block).
ReplyProgram tool_call_program(ChatStyle style, const Tokenizer& tokenizer, const std::vector<ReplyTool>& tools, bool parallel,
                               bool thinking);
ReplyProgram structured_output_program(ChatStyle style, const Tokenizer& tokenizer, std::shared_ptr<const CompiledSchema> schema,
                                       bool thinking);

}  // namespace deltafin
