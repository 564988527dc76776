// Chat formats of the supported model families, rendered as segments: control tokens and
// ordinary text. Segments are tokenized one by one (message text with special-token recognition
// off, so text that looks like a control token stays text). Kimi K3's official encoder tokenizes
// its pieces (tag names, attributes, values, message text) separately; for K2 and DeepSeek-V3 each
// run of text between two control tokens is one segment, as their tokenizers split a rendered
// template at the control tokens.
//   Kimi K2:     <|im_system|>system<|im_middle|>TEXT<|im_end|><|im_user|>user<|im_middle|>TEXT<|im_end|>
//                <|im_assistant|>assistant<|im_middle|>
//   Kimi K2-Thinking (K2's tokens plus <think> and </think>): K2's, with <think>...</think> in
//                assistant turns and the tool-call section in the history.
//   Kimi K3:     <|open|>message role="user"<|sep|>TEXT<|close|>message<|sep|><|end_of_msg|> ...
//                <|open|>message role="assistant"<|sep|><|open|>think<|sep|>      (thinking on)
//   DeepSeek-V3: <｜begin▁of▁sentence｜>SYSTEM<｜User｜>TEXT<｜Assistant｜>
//   Plain (a tokenizer with none of these, e.g. the bundled model): a transcript of ordinary text,
//                "System: TEXT\n\nUser: TEXT\n\nAssistant:" (no control tokens, no stop tokens;
//                tools, tool calls and reasoning are not rendered).
// Tools, tool calls, tool results and earlier reasoning are rendered byte for byte as each family's
// official chat template does, quirks included (docs/chat-formats.md; tests/test_chat_templates.cpp
// checks the renders against the templates' own on a corpus).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer.hpp"
#include "util/json_value.hpp"

namespace deltafin {

enum class ChatStyle { KimiK2, KimiK2Thinking, KimiK3, DeepSeekV3, Plain };

// A call of a tool, as an assistant message carries it (OpenAI's tool_calls entries).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the client (or the model) wrote it
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content = "") : role(std::move(role)), content(std::move(content)) {}

  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;
  bool content_null = false;       // content was null or absent (an assistant turn that only calls tools)
  std::string name;                // the participant's name, when given
  std::string reasoning_content;   // assistant: the turn's reasoning, when the client sends it back
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;        // tool: the call this result answers
};

// What a chat template is given besides the messages.
struct ChatOptions {
  const JsonValue* tools = nullptr;  // the request's `tools` array; nullptr or empty: none declared
  std::string tool_choice;           // "", "auto", "none", "required" or a function's name
  std::string response_format;       // "", "json_object" or "json_schema"
  const JsonValue* response_schema = nullptr;  // json_schema's schema
  bool add_generation_prompt = true;
  bool thinking = true;  // Kimi K3: open the think block (else the response block)
};

struct PromptSegment {
  std::string text;
  bool special = false;  // a control token, looked up by its text
};

// The style a tokenizer's special tokens announce; Plain when none is known.
ChatStyle detect_chat_style(const Tokenizer& tokenizer);
const char* chat_style_name(ChatStyle style);

// Renders a conversation and, when add_generation_prompt, the opening of the assistant's turn.
// Empty name, reasoning_content, tool call id and tool_call_id count as absent. Throws
// deltafin::Error where the template raises and no rendering is defined: a Kimi K3 tool message
// with no name that answers no call of the latest assistant message.
std::vector<PromptSegment> render_chat(ChatStyle style, const std::vector<ChatMessage>& messages, const ChatOptions& options);
inline std::vector<PromptSegment> render_chat(ChatStyle style, const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt) {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return render_chat(style, messages, options);
}

// Tokenizes segments one by one; throws when a control token is not in the vocabulary.
std::vector<int32_t> encode_segments(const Tokenizer& tokenizer, const std::vector<PromptSegment>& segments);

// Tokens that end the assistant's turn in this style (those the vocabulary has).
std::vector<int32_t> chat_stop_ids(ChatStyle style, const Tokenizer& tokenizer);

}  // namespace deltafin
