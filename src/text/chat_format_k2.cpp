// Kimi K2 (Instruct) and Kimi K2-Thinking chat formats, rendered as their official templates do
// (docs/chat-formats.md), quirks included:
//   K2-Instruct declares tools but writes no tool calls in the history (only the assistant's text),
//   and its tool results are `<|im_system|>tool<|im_middle|>RESULT<|im_end|>` messages.
//   K2-Thinking (Moonshot AI's own template) writes tool calls as <|tool_calls_section_begin|>
//   <|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS<|tool_call_end|>...
//   <|tool_calls_section_end|>, a tool result as "## Return of TOOL_CALL_ID\n" and the result, and
//   keeps the reasoning of the assistant turns after the last assistant message without tool
//   calls; earlier turns get an empty <think></think>.
#include "text/chat_segments.hpp"
#include "util/json_value.hpp"

namespace deltafin {
namespace {

void declare_tools(SegmentWriter& w, const ChatOptions& options) {
  if (!declares_tools(options)) return;
  w.special("<|im_system|>");
  w.text("tool_declare");
  w.special("<|im_middle|>");
  w.text(write_json(*options.tools));  // transformers' tojson: json.dumps with ", " and ": "
  w.special("<|im_end|>");
}

void header(SegmentWriter& w, const char* token, const std::string& role_name) {
  w.special(token);
  w.text(role_name);
  w.special("<|im_middle|>");
}

}  // namespace

std::vector<PromptSegment> render_kimi_k2(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  SegmentWriter w(true);
  declare_tools(w, options);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i == 0 && m.role != "system") {  // (an empty conversation gets no default system message)
      header(w, "<|im_system|>", "system");
      w.text("You are a helpful assistant");
      w.special("<|im_end|>");
    }
    if (m.role == "system") header(w, "<|im_system|>", "system");
    else if (m.role == "user") header(w, "<|im_user|>", "user");
    else if (m.role == "assistant") header(w, "<|im_assistant|>", "assistant");
    else if (m.role == "tool") header(w, "<|im_system|>", "tool");
    w.text(m.content);  // null content: the template raises on null, and writes nothing when absent
    w.special("<|im_end|>");
  }
  if (options.add_generation_prompt) header(w, "<|im_assistant|>", "assistant");
  return w.take();
}

std::vector<PromptSegment> render_kimi_k2_thinking(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  // The reasoning-keeping suffix starts after the last assistant message without tool calls.
  size_t suffix_start = 0;
  for (size_t i = messages.size(); i-- > 0;)
    if (messages[i].role == "assistant" && messages[i].tool_calls.empty()) {
      suffix_start = i + 1;
      break;
    }
  SegmentWriter w(true);
  declare_tools(w, options);
  if (messages.empty() || messages.front().role != "system") {
    header(w, "<|im_system|>", "system");
    w.text("You are Kimi, an AI assistant created by Moonshot AI.");
    w.special("<|im_end|>");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string& role_name = m.name.empty() ? m.role : m.name;
    header(w, m.role == "user" ? "<|im_user|>" : m.role == "assistant" ? "<|im_assistant|>" : "<|im_system|>", role_name);
    if (m.role == "assistant") {
      w.special("<think>");
      if (i >= suffix_start) w.text(m.reasoning_content);
      w.special("</think>");
      w.text(m.content);
      if (!m.tool_calls.empty()) {
        w.special("<|tool_calls_section_begin|>");
        for (const ToolCall& call : m.tool_calls) {
          w.special("<|tool_call_begin|>");
          w.text(call.id);
          w.special("<|tool_call_argument_begin|>");
          w.text(call.arguments);
          w.special("<|tool_call_end|>");
        }
        w.special("<|tool_calls_section_end|>");
      }
    } else if (m.role == "tool") {
      w.text("## Return of " + m.tool_call_id + "\n");
      w.text(m.content);
    } else {
      w.text(m.content);
    }
    w.special("<|im_end|>");
  }
  if (options.add_generation_prompt) header(w, "<|im_assistant|>", "assistant");
  return w.take();
}

}  // namespace deltafin
