// Chat rendering (see chat_format.hpp): style detection, the Plain transcript, segment encoding and
// stop tokens; each family's renderer is in its own file (chat_segments.hpp lists them).
#include "text/chat_format.hpp"

#include "text/chat_segments.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

std::vector<PromptSegment> render_plain(const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::string transcript;
  for (const ChatMessage& m : messages) {
    const std::string speaker = m.role == "system" ? "System" : m.role == "user" ? "User" : m.role == "tool" ? "Tool" : "Assistant";
    transcript += (transcript.empty() ? "" : "\n\n") + speaker + ": " + m.content;
  }
  if (generation_prompt) transcript += transcript.empty() ? "Assistant:" : "\n\nAssistant:";
  SegmentWriter out(true);
  out.text(transcript);
  return out.take();
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
  switch (style) {
    case ChatStyle::KimiK2: return render_kimi_k2(messages, options);
    case ChatStyle::KimiK2Thinking: return render_kimi_k2_thinking(messages, options);
    case ChatStyle::KimiK3: return render_kimi_k3(messages, options);
    case ChatStyle::Plain: return render_plain(messages, options.add_generation_prompt);
    default: return render_deepseek_v3(messages, options);
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
