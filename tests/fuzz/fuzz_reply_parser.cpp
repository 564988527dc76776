// libFuzzer target: the reply parser (text/reply_parser.hpp) on any model output. The first byte
// picks the chat family and the options, the second the piece size; the rest is the reply, fed in
// pieces. The deltas must add up to the parsed reply (each call's id, name and arguments), the
// same as the reply read whole; anything else (a crash, a sanitizer report, an exception) is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "text/reply_parser.hpp"

namespace {

using deltafin::ChatStyle;
using deltafin::Reply;
using deltafin::ReplyDelta;
using deltafin::ReplyParser;

void add(Reply& r, const ReplyDelta& d) {
  switch (d.kind) {
    case ReplyDelta::Kind::Reasoning: r.reasoning += d.text; break;
    case ReplyDelta::Kind::Content: r.content += d.text; break;
    case ReplyDelta::Kind::ToolCall:
      if (d.index != r.tool_calls.size()) __builtin_trap();
      r.tool_calls.push_back(d.call);
      break;
    case ReplyDelta::Kind::Arguments:
      if (d.index >= r.tool_calls.size()) __builtin_trap();
      r.tool_calls[d.index].arguments += d.text;
  }
}

bool same(const Reply& a, const Reply& b) {
  if (a.reasoning != b.reasoning || a.content != b.content || a.tool_calls.size() != b.tool_calls.size()) return false;
  for (size_t i = 0; i < a.tool_calls.size(); ++i)
    if (a.tool_calls[i].id != b.tool_calls[i].id || a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  constexpr ChatStyle kStyles[] = {ChatStyle::KimiK2, ChatStyle::KimiK2Thinking, ChatStyle::KimiK3, ChatStyle::DeepSeekV3,
                                   ChatStyle::Plain};
  const ChatStyle style = kStyles[data[0] % 5];
  const bool reasoning_first = data[0] & 8, inline_reasoning = data[0] & 16;
  const size_t piece = 1 + data[1] % 16;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);

  ReplyParser whole(style, reasoning_first, inline_reasoning);
  Reply from_whole;
  for (const ReplyDelta& d : whole.push(text)) add(from_whole, d);
  for (const ReplyDelta& d : whole.finish()) add(from_whole, d);
  ReplyParser pieces(style, reasoning_first, inline_reasoning);
  Reply from_pieces;
  for (size_t i = 0; i < text.size(); i += piece)
    for (const ReplyDelta& d : pieces.push(text.substr(i, piece))) add(from_pieces, d);
  for (const ReplyDelta& d : pieces.finish()) add(from_pieces, d);
  if (!same(from_whole, whole.reply()) || !same(from_pieces, pieces.reply())) __builtin_trap();
  return 0;
}
