// DeepSeek-V3's chat format, rendered as its official template (tokenizer_config.json's
// chat_template) does, quirks included (docs/chat-formats.md):
//   - every system message's text goes first, joined with "\n\n", right after <｜begin▁of▁sentence｜>;
//   - `tools` are not declared at all, and reasoning is not rendered;
//   - an assistant message with tool calls and null content is written as
//     <｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//     for the conversation's first call only; every later call (in any message) is
//     \n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>, so a lone call's
//     section stays open; an assistant message with content drops its tool calls;
//   - tool results: <｜tool▁outputs▁begin｜> before the conversation's first one only, each result in
//     <｜tool▁output▁begin｜>...<｜tool▁output▁end｜> (later ones after "\n"), closed by
//     <｜tool▁outputs▁end｜> before the next assistant text or at the end (then no generation prompt).
#include "text/chat_segments.hpp"

namespace deltafin {
namespace {

void write_call(SegmentWriter& w, const ToolCall& call) {
  w.special("<｜tool▁call▁begin｜>");
  w.text("function");
  w.special("<｜tool▁sep｜>");
  w.text(call.name + "\n```json\n" + call.arguments + "\n```");
  w.special("<｜tool▁call▁end｜>");
}

}  // namespace

std::vector<PromptSegment> render_deepseek_v3(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  SegmentWriter w(true);
  w.special("<｜begin▁of▁sentence｜>");
  bool first_system = true;
  for (const ChatMessage& m : messages)
    if (m.role == "system") {
      w.text(first_system ? m.content : "\n\n" + m.content);
      first_system = false;
    }
  bool call_written = false;   // the template's ns.is_first: set by the first call, never reset
  bool in_tool_outputs = false;
  bool output_written = false;  // ns.is_output_first, inverted: never reset either
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      in_tool_outputs = false;
      w.special("<｜User｜>");
      w.text(m.content);
    } else if (m.role == "assistant" && m.content_null) {
      in_tool_outputs = false;
      for (const ToolCall& call : m.tool_calls) {
        if (!call_written) {
          w.special("<｜Assistant｜>");
          w.special("<｜tool▁calls▁begin｜>");
          write_call(w, call);
          call_written = true;
        } else {
          w.text("\n");
          write_call(w, call);
          w.special("<｜tool▁calls▁end｜>");
          w.special("<｜end▁of▁sentence｜>");
        }
      }
    } else if (m.role == "assistant") {
      w.special(in_tool_outputs ? "<｜tool▁outputs▁end｜>" : "<｜Assistant｜>");
      w.text(m.content);
      w.special("<｜end▁of▁sentence｜>");
      in_tool_outputs = false;
    } else if (m.role == "tool") {
      in_tool_outputs = true;
      if (!output_written) {
        w.special("<｜tool▁outputs▁begin｜>");
      } else {
        w.text("\n");
      }
      w.special("<｜tool▁output▁begin｜>");
      w.text(m.content);
      w.special("<｜tool▁output▁end｜>");
      output_written = true;
    }
  }
  if (in_tool_outputs) w.special("<｜tool▁outputs▁end｜>");
  if (options.add_generation_prompt && !in_tool_outputs) w.special("<｜Assistant｜>");
  return w.take();
}

}  // namespace deltafin
