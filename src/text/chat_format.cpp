// Chat rendering (see chat_format.hpp).
#include "text/chat_format.hpp"

#include "util/error.hpp"

namespace deltafin {
namespace {

constexpr const char* kK2DefaultSystem = "You are a helpful assistant";

void special(std::vector<PromptSegment>& out, const char* token) { out.push_back({token, true}); }
void text(std::vector<PromptSegment>& out, std::string s) {
  if (!s.empty()) out.push_back({std::move(s), false});
}

std::vector<PromptSegment> render_k2(const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::vector<PromptSegment> out;
  if (messages.empty() || messages.front().role != "system") {
    special(out, "<|im_system|>");
    text(out, "system");
    special(out, "<|im_middle|>");
    text(out, kK2DefaultSystem);
    special(out, "<|im_end|>");
  }
  for (const ChatMessage& m : messages) {
    special(out, m.role == "system" ? "<|im_system|>" : m.role == "user" ? "<|im_user|>" : "<|im_assistant|>");
    text(out, m.role);
    special(out, "<|im_middle|>");
    text(out, m.content);
    special(out, "<|im_end|>");
  }
  if (generation_prompt) {
    special(out, "<|im_assistant|>");
    text(out, "assistant");
    special(out, "<|im_middle|>");
  }
  return out;
}

// XTML: tag names, ' key', '="', the escaped value and '"' are separate text segments.
void k3_open(std::vector<PromptSegment>& out, const std::string& tag, const std::string& role) {
  special(out, "<|open|>");
  text(out, tag);
  if (!role.empty()) {
    text(out, " role");
    text(out, "=\"");
    text(out, role);  // roles need no escaping
    text(out, "\"");
  }
  special(out, "<|sep|>");
}

void k3_close(std::vector<PromptSegment>& out, const std::string& tag) {
  special(out, "<|close|>");
  text(out, tag);
  special(out, "<|sep|>");
}

std::vector<PromptSegment> render_k3(const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::vector<PromptSegment> out;
  for (const ChatMessage& m : messages) {
    k3_open(out, "message", m.role);
    if (m.role == "assistant") {
      k3_open(out, "think", "");
      k3_close(out, "think");
      k3_open(out, "response", "");
      text(out, m.content);
      k3_close(out, "response");
    } else {
      text(out, m.content);
    }
    k3_close(out, "message");
    special(out, "<|end_of_msg|>");
  }
  if (generation_prompt) {
    k3_open(out, "message", "assistant");
    k3_open(out, "think", "");
  }
  return out;
}

std::vector<PromptSegment> render_deepseek_v3(const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::vector<PromptSegment> out;
  special(out, "<｜begin▁of▁sentence｜>");
  for (const ChatMessage& m : messages)
    if (m.role == "system") text(out, m.content);
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      special(out, "<｜User｜>");
      text(out, m.content);
    } else if (m.role == "assistant") {
      special(out, "<｜Assistant｜>");
      text(out, m.content);
      special(out, "<｜end▁of▁sentence｜>");
    }
  }
  if (generation_prompt) special(out, "<｜Assistant｜>");
  return out;
}

std::vector<PromptSegment> render_plain(const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::string transcript;
  for (const ChatMessage& m : messages) {
    const std::string speaker = m.role == "system" ? "System" : m.role == "user" ? "User" : "Assistant";
    transcript += (transcript.empty() ? "" : "\n\n") + speaker + ": " + m.content;
  }
  if (generation_prompt) transcript += transcript.empty() ? "Assistant:" : "\n\nAssistant:";
  std::vector<PromptSegment> out;
  text(out, transcript);
  return out;
}

}  // namespace

ChatStyle detect_chat_style(const Tokenizer& t) {
  if (t.special_id("<|open|>") && t.special_id("<|end_of_msg|>")) return ChatStyle::KimiK3;
  if (t.special_id("<|im_middle|>") && t.special_id("<|im_end|>"))
    return t.special_id("<think>") && t.special_id("</think>") ? ChatStyle::KimiK2Thinking : ChatStyle::KimiK2;
  if (t.special_id("<｜User｜>") && t.special_id("<｜Assistant｜>")) return ChatStyle::DeepSeekV3;
  return ChatStyle::Plain;
}

const char* chat_style_name(ChatStyle style) {
  switch (style) {
    case ChatStyle::KimiK2: return "kimi-k2";
    case ChatStyle::KimiK2Thinking: return "kimi-k2-thinking";
    case ChatStyle::KimiK3: return "kimi-k3";
    case ChatStyle::Plain: return "plain";
    default: return "deepseek-v3";
  }
}

std::vector<PromptSegment> render_chat(ChatStyle style, const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  const bool add_generation_prompt = options.add_generation_prompt;
  switch (style) {
    case ChatStyle::KimiK2:
    case ChatStyle::KimiK2Thinking: return render_k2(messages, add_generation_prompt);
    case ChatStyle::KimiK3: return render_k3(messages, add_generation_prompt);
    case ChatStyle::Plain: return render_plain(messages, add_generation_prompt);
    default: return render_deepseek_v3(messages, add_generation_prompt);
  }
}

std::vector<int32_t> encode_segments(const Tokenizer& tokenizer, const std::vector<PromptSegment>& segments) {
  std::vector<int32_t> ids;
  for (const PromptSegment& s : segments) {
    if (s.special) {
      const auto id = tokenizer.special_id(s.text);
      if (!id) fail("chat format: control token '{}' is not in the tokenizer's vocabulary", s.text);
      ids.push_back(*id);
    } else {
      const std::vector<int32_t> piece = tokenizer.encode(s.text, false);
      ids.insert(ids.end(), piece.begin(), piece.end());
    }
  }
  return ids;
}

std::vector<int32_t> chat_stop_ids(ChatStyle style, const Tokenizer& tokenizer) {
  std::vector<const char*> names;
  switch (style) {
    case ChatStyle::KimiK2:
    case ChatStyle::KimiK2Thinking: names = {"<|im_end|>", "[EOS]"}; break;
    case ChatStyle::KimiK3: names = {"<|end_of_msg|>", "[EOS]"}; break;
    case ChatStyle::Plain: break;
    default: names = {"<｜end▁of▁sentence｜>"};
  }
  std::vector<int32_t> ids;
  for (const char* n : names)
    if (auto id = tokenizer.special_id(n)) ids.push_back(*id);
  return ids;
}

}  // namespace deltafin
