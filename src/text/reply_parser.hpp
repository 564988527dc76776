// The model's reply, split as OpenAI's chat API returns it: the reasoning (reasoning_content), the
// answer (content) and the tool calls (tool_calls: id, function name, arguments as the model wrote
// them). Each family writes these in its own chat format (docs/chat-formats.md):
//   Kimi K2:          ANSWER<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:I
//                     <|tool_call_argument_begin|>{JSON}<|tool_call_end|>...<|tool_calls_section_end|>
//   Kimi K2-Thinking: <think>REASONING</think> then as K2
//   Kimi K3:          REASONING<|close|>think<|sep|><|open|>response<|sep|>ANSWER<|close|>response<|sep|>
//                     [<|open|>tools<|sep|><|open|>call tool="NAME" index="I"<|sep|>ARGUMENTS<|close|>call<|sep|>
//                     ...<|close|>tools<|sep|>]  (the prompt opened the think block, or the response block)
//   DeepSeek-V3:      ANSWER<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n
//                     JSON\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// The parser reads the generated text piece by piece (control tokens appear as their text) and
// says what became known after each piece, as the deltas a streamed response sends: text that
// could still be the start of a marker is held back until it is decided. Arguments are passed on
// as written, never repaired. With reasoning kept inline, the reasoning stays in the content,
// wrapped in <think>...</think>.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/chat_format.hpp"

namespace deltafin {

struct ReplyDelta {
  enum class Kind { Reasoning, Content, ToolCall, Arguments };
  Kind kind = Kind::Content;
  std::string text;  // Reasoning, Content, Arguments: the new text
  size_t index = 0;  // ToolCall, Arguments: the call's position in tool_calls
  ToolCall call;     // ToolCall: its id and name (arguments follow as Arguments deltas)
};

struct Reply {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
};

// The text that opens a tool-call section in the style's replies ("" for Plain).
std::string tool_calls_start(ChatStyle style);

class ReplyParser {
 public:
  // reasoning_first: the prompt opened the reasoning (Kimi K3 with thinking on). inline_reasoning:
  // the reasoning stays in the content.
  ReplyParser(ChatStyle style, bool reasoning_first, bool inline_reasoning);

  std::vector<ReplyDelta> push(std::string_view text);
  // The generation ended: whatever was held back is decided.
  std::vector<ReplyDelta> finish();
  // Everything parsed so far (all of it after finish()).
  const Reply& reply() const { return reply_; }

 private:
  std::vector<ReplyDelta> advance(bool final);

  ChatStyle style_;
  bool reasoning_first_, inline_reasoning_;
  std::string text_;
  Reply reply_;  // what the deltas sent so far add up to
};

}  // namespace deltafin
