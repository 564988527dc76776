// The pieces the chat renderers share: a writer of prompt segments and the renderer of each family
// (chat_format_k2.cpp, chat_format_k3.cpp, chat_format_deepseek.cpp). Internal to src/text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/chat_format.hpp"

namespace deltafin {

// Appends control tokens and text. With merge_text, text joins the text segment before it, so each
// run of text between two control tokens is one segment (as a Hugging Face tokenizer splits a
// rendered template at its special tokens); without, every piece stays its own segment (Kimi K3's
// encoder tokenizes tag names, attributes and values separately). Empty text is dropped.
class SegmentWriter {
 public:
  explicit SegmentWriter(bool merge_text) : merge_text_(merge_text) {}
  void special(std::string_view token) { out_.push_back({std::string(token), true}); }
  void text(std::string_view s) {
    if (s.empty()) return;
    if (merge_text_ && !out_.empty() && !out_.back().special)
      out_.back().text += s;
    else
      out_.push_back({std::string(s), false});
  }
  std::vector<PromptSegment> take() { return std::move(out_); }

 private:
  bool merge_text_;
  std::vector<PromptSegment> out_;
};

// True when the options declare at least one tool.
inline bool declares_tools(const ChatOptions& options) {
  return options.tools != nullptr && options.tools->is_array() && !options.tools->items().empty();
}

std::vector<PromptSegment> render_kimi_k2(const std::vector<ChatMessage>& messages, const ChatOptions& options);
std::vector<PromptSegment> render_kimi_k2_thinking(const std::vector<ChatMessage>& messages, const ChatOptions& options);
std::vector<PromptSegment> render_kimi_k3(const std::vector<ChatMessage>& messages, const ChatOptions& options);
std::vector<PromptSegment> render_deepseek_v3(const std::vector<ChatMessage>& messages, const ChatOptions& options);

}  // namespace deltafin
