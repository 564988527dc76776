// Chat formats of the supported model families, rendered as segments: control tokens and
// ordinary text. Segments are tokenized one by one (message text with special-token recognition
// off), as Kimi K3's official encoder does; for K2 and DeepSeek-V3 this gives the same ids as
// their chat templates.
//   Kimi K2:     <|im_system|>system<|im_middle|>TEXT<|im_end|><|im_user|>user<|im_middle|>TEXT<|im_end|>
//                <|im_assistant|>assistant<|im_middle|>
//   Kimi K3:     <|open|>message role="user"<|sep|>TEXT<|close|>message<|sep|><|end_of_msg|> ...
//                <|open|>message role="assistant"<|sep|><|open|>think<|sep|>      (thinking on)
//   DeepSeek-V3: <｜begin▁of▁sentence｜>SYSTEM<｜User｜>TEXT<｜Assistant｜>
//   Plain (a tokenizer with none of these, e.g. the bundled model): a transcript of ordinary text,
//                "System: TEXT\n\nUser: TEXT\n\nAssistant:" (no control tokens, no stop tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.hpp"

namespace deltafin {

enum class ChatStyle { KimiK2, KimiK3, DeepSeekV3, Plain };

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

struct PromptSegment {
  std::string text;
  bool special = false;  // a control token, looked up by its text
};

// The style a tokenizer's special tokens announce; Plain when none is known.
ChatStyle detect_chat_style(const Tokenizer& tokenizer);
const char* chat_style_name(ChatStyle style);

// Renders a conversation and, when add_generation_prompt, the opening of the assistant's turn.
std::vector<PromptSegment> render_chat(ChatStyle style, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt);

// Tokenizes segments one by one; throws when a control token is not in the vocabulary.
std::vector<int32_t> encode_segments(const Tokenizer& tokenizer, const std::vector<PromptSegment>& segments);

// Tokens that end the assistant's turn in this style (those the vocabulary has).
std::vector<int32_t> chat_stop_ids(ChatStyle style, const Tokenizer& tokenizer);

}  // namespace deltafin
