// Reply parsing (see reply_parser.hpp). Each push re-reads the whole reply so far (replies are
// short next to the work of generating them) into a snapshot, and the deltas are what the
// snapshot adds to what was sent: text, calls and arguments only ever grow, because text that
// could still be the start of a marker is cut off before reading until it is decided.
#include "text/reply_parser.hpp"

#include <algorithm>

#include "util/json_value.hpp"

namespace deltafin {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
// Kimi K2
constexpr std::string_view kK2SectionBegin = "<|tool_calls_section_begin|>", kK2SectionEnd = "<|tool_calls_section_end|>",
                           kK2CallBegin = "<|tool_call_begin|>", kK2ArgumentBegin = "<|tool_call_argument_begin|>",
                           kK2CallEnd = "<|tool_call_end|>";
// Kimi K3 (XTML)
constexpr std::string_view kK3Open = "<|open|>", kK3Close = "<|close|>", kK3Sep = "<|sep|>", kK3EndOfMessage = "<|end_of_msg|>";
// DeepSeek-V3
constexpr std::string_view kDsSectionBegin = "<｜tool▁calls▁begin｜>", kDsSectionEnd = "<｜tool▁calls▁end｜>",
                           kDsCallBegin = "<｜tool▁call▁begin｜>", kDsSep = "<｜tool▁sep｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                           kDsJsonOpen = "```json\n", kDsJsonClose = "\n```";

struct Snapshot {
  std::string reasoning;
  bool reasoning_closed = false;
  bool had_reasoning = false;  // a reasoning block was opened
  std::string content;
  std::vector<ToolCall> calls;
};

std::vector<std::string_view> markers(ChatStyle style) {
  switch (style) {
    case ChatStyle::KimiK2:
    case ChatStyle::KimiK2Thinking:
      return {kThinkOpen, kThinkClose, kK2SectionBegin, kK2SectionEnd, kK2CallBegin, kK2ArgumentBegin, kK2CallEnd};
    case ChatStyle::KimiK3: return {kK3Open, kK3Close, kK3Sep, kK3EndOfMessage};
    case ChatStyle::DeepSeekV3: return {kDsSectionBegin, kDsSectionEnd, kDsCallBegin, kDsSep, kDsCallEnd, kDsJsonClose};
    default: return {};
  }
}

// The length of the longest end of `text` that a marker starts with (and is not all of).
size_t undecided_tail(std::string_view text, const std::vector<std::string_view>& marks) {
  size_t tail = 0;
  for (std::string_view m : marks)
    for (size_t n = std::min(m.size() - 1, text.size()); n > tail; --n)
      if (text.substr(text.size() - n) == m.substr(0, n)) {
        tail = n;
        break;
      }
  return tail;
}

std::string_view trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// The text from `from` up to `marker` (or the end); `end` is set past the marker, or npos.
std::string_view until(std::string_view text, size_t from, std::string_view marker, size_t& end) {
  const size_t at = text.find(marker, from);
  end = at == std::string_view::npos ? std::string_view::npos : at + marker.size();
  return text.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from);
}

std::string_view until(std::string_view text, size_t from, std::string_view marker) {
  size_t end;
  return until(text, from, marker, end);
}

// "functions.NAME:INDEX" (Kimi K2's call ids) to NAME.
std::string name_from_k2_id(std::string_view id) {
  if (id.starts_with("functions.")) id.remove_prefix(10);
  const size_t colon = id.rfind(':');
  if (colon != std::string_view::npos && colon + 1 < id.size() &&
      std::all_of(id.begin() + static_cast<long>(colon) + 1, id.end(), [](char c) { return c >= '0' && c <= '9'; }))
    id = id.substr(0, colon);
  return std::string(id);
}

std::string call_id(const std::string& name, size_t index) { return "functions." + name + ":" + std::to_string(index); }

// <think>REASONING</think> at the start of the reply (Kimi K2-Thinking); returns where the rest starts.
size_t read_think_block(std::string_view text, Snapshot& s) {
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || !text.substr(start).starts_with(kThinkOpen)) return 0;
  s.had_reasoning = true;
  size_t end;
  s.reasoning = std::string(until(text, start + kThinkOpen.size(), kThinkClose, end));
  s.reasoning_closed = end != std::string_view::npos;
  return s.reasoning_closed ? end : text.size();
}

void read_k2(std::string_view text, bool thinking, Snapshot& s) {
  const size_t from = thinking ? read_think_block(text, s) : 0;
  if (s.had_reasoning && !s.reasoning_closed) return;
  size_t section;
  s.content = std::string(until(text, from, kK2SectionBegin, section));
  if (section == std::string_view::npos) return;
  const std::string_view calls = until(text, section, kK2SectionEnd);
  for (size_t p = 0;;) {
    const size_t begin = calls.find(kK2CallBegin, p);
    if (begin == std::string_view::npos) break;
    size_t args_from;
    const std::string_view id = trim(until(calls, begin + kK2CallBegin.size(), kK2ArgumentBegin, args_from));
    if (args_from == std::string_view::npos) break;  // the id is not complete yet
    size_t end;
    const std::string_view args = until(calls, args_from, kK2CallEnd, end);
    s.calls.push_back({std::string(id), name_from_k2_id(id), std::string(args)});
    if (end == std::string_view::npos) break;
    p = end;
  }
}

// The attributes of an XTML open tag (` key="value"` pairs, &quot; and &amp; unescaped).
std::string attribute(std::string_view attrs, std::string_view key) {
  std::string pattern(" ");
  pattern.append(key).append("=\"");
  const size_t at = attrs.find(pattern);
  if (at == std::string_view::npos) return "";
  const size_t from = at + pattern.size();
  const std::string_view raw = until(attrs, from, "\"");
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw.substr(i).starts_with("&quot;")) out += '"', i += 5;
    else if (raw.substr(i).starts_with("&amp;")) out += '&', i += 4;
    else out += raw[i];
  }
  return out;
}

std::string k3_close(std::string_view tag) { return std::string(kK3Close) + std::string(tag) + std::string(kK3Sep); }
std::string k3_open(std::string_view tag) { return std::string(kK3Open) + std::string(tag) + std::string(kK3Sep); }

// A call's body: a json block, or argument tags gathered into one JSON object.
std::string k3_arguments(std::string_view body, bool closed) {
  const std::string_view lead = body.substr(std::min(body.size(), body.find_first_not_of(" \t\r\n")));
  if (lead.starts_with(std::string(kK3Open) + "json")) {
    const size_t sep = lead.find(kK3Sep);
    if (sep == std::string_view::npos) return "";
    size_t end;
    return std::string(until(lead, sep + kK3Sep.size(), k3_close("json"), end));
  }
  std::string json;
  const std::string open = std::string(kK3Open) + "argument";
  for (size_t p = 0;;) {
    const size_t at = lead.find(open, p);
    if (at == std::string_view::npos) break;
    const size_t sep = lead.find(kK3Sep, at);
    if (sep == std::string_view::npos) break;
    size_t end;
    const std::string_view value = until(lead, sep + kK3Sep.size(), k3_close("argument"), end);
    if (end == std::string_view::npos) break;  // an argument is passed on whole
    const std::string_view attrs = lead.substr(at + open.size(), sep - at - open.size());
    json += json.empty() ? "{" : ", ";
    json += python_json_string(attribute(attrs, "key")) + ": ";
    json += attribute(attrs, "type") == "string" ? python_json_string(value) : std::string(value);
    p = end;
  }
  if (closed) json += json.empty() ? "{}" : "}";
  return json;
}

void read_k3(std::string_view text, bool reasoning_first, Snapshot& s) {
  text = text.substr(0, text.find(k3_close("message")));
  size_t from = 0;
  if (reasoning_first) {
    s.had_reasoning = true;
    s.reasoning = std::string(until(text, 0, k3_close("think"), from));
    s.reasoning_closed = from != std::string_view::npos;
    if (!s.reasoning_closed) return;
    const size_t response = text.find(k3_open("response"), from);
    if (response == std::string_view::npos) return;
    from = response + k3_open("response").size();
  }
  size_t after;
  s.content = std::string(until(text, from, k3_close("response"), after));
  if (after == std::string_view::npos) return;
  const size_t tools = text.find(k3_open("tools"), after);
  if (tools == std::string_view::npos) return;
  const std::string_view calls = until(text, tools, k3_close("tools"));
  const std::string open = std::string(kK3Open) + "call";
  for (size_t p = 0;;) {
    const size_t at = calls.find(open, p);
    if (at == std::string_view::npos) break;
    const size_t sep = calls.find(kK3Sep, at);
    if (sep == std::string_view::npos) break;
    const std::string name = attribute(calls.substr(at + open.size(), sep - at - open.size()), "tool");
    size_t end;
    const std::string_view body = until(calls, sep + kK3Sep.size(), k3_close("call"), end);
    s.calls.push_back({call_id(name, s.calls.size()), name, k3_arguments(body, end != std::string_view::npos)});
    if (end == std::string_view::npos) break;
    p = end;
  }
}

void read_deepseek_v3(std::string_view text, Snapshot& s) {
  size_t section;
  s.content = std::string(until(text, 0, kDsSectionBegin, section));
  if (section == std::string_view::npos) return;
  const std::string_view calls = until(text, section, kDsSectionEnd);
  for (size_t p = 0;;) {
    const size_t begin = calls.find(kDsCallBegin, p);
    if (begin == std::string_view::npos) break;
    size_t name_from;
    until(calls, begin, kDsSep, name_from);
    if (name_from == std::string_view::npos) break;
    const size_t newline = calls.find('\n', name_from);
    if (newline == std::string_view::npos) break;  // the name is not complete yet
    const std::string name(trim(calls.substr(name_from, newline - name_from)));
    size_t json_from = newline + 1;
    if (calls.substr(json_from).starts_with(kDsJsonOpen)) json_from += kDsJsonOpen.size();
    else if (std::string_view(kDsJsonOpen).starts_with(calls.substr(json_from))) break;  // not decided yet
    size_t end;
    std::string_view args = until(calls, json_from, kDsCallEnd, end);
    args = args.substr(0, args.find(kDsJsonClose));
    s.calls.push_back({call_id(name, s.calls.size()), name, std::string(args)});
    if (end == std::string_view::npos) break;
    p = end;
  }
}

// What `now` adds to `sent` (both grow only); empty when it does not extend it.
std::string extension(const std::string& sent, const std::string& now) {
  if (now.size() <= sent.size() || now.compare(0, sent.size(), sent) != 0) return "";
  return now.substr(sent.size());
}

// Kimi K3's tags are decided at their <|sep|>: an open or close tag without one is cut off.
size_t undecided_k3_tag(std::string_view text) {
  const size_t last_tag = std::max(text.rfind(kK3Open) + 1, text.rfind(kK3Close) + 1);  // (npos + 1 is 0)
  if (last_tag == 0 || text.find(kK3Sep, last_tag) != std::string_view::npos) return 0;
  return text.size() - (last_tag - 1);
}

}  // namespace

std::string tool_calls_start(ChatStyle style) {
  switch (style) {
    case ChatStyle::KimiK2:
    case ChatStyle::KimiK2Thinking: return std::string(kK2SectionBegin);
    case ChatStyle::KimiK3: return k3_open("tools");
    case ChatStyle::DeepSeekV3: return std::string(kDsSectionBegin);
    default: return "";
  }
}

ReplyParser::ReplyParser(ChatStyle style, bool reasoning_first, bool inline_reasoning)
    : style_(style), reasoning_first_(reasoning_first), inline_reasoning_(inline_reasoning) {}

std::vector<ReplyDelta> ReplyParser::push(std::string_view text) {
  text_ += text;
  return advance(false);
}

std::vector<ReplyDelta> ReplyParser::finish() { return advance(true); }

std::vector<ReplyDelta> ReplyParser::advance(bool final) {
  std::string_view text = text_;
  if (!final) text.remove_suffix(undecided_tail(text, markers(style_)));
  if (!final && style_ == ChatStyle::KimiK3) text.remove_suffix(undecided_k3_tag(text));
  Snapshot s;
  switch (style_) {
    case ChatStyle::KimiK2:
    case ChatStyle::KimiK2Thinking: read_k2(text, style_ == ChatStyle::KimiK2Thinking, s); break;
    case ChatStyle::KimiK3: read_k3(text, reasoning_first_, s); break;
    case ChatStyle::DeepSeekV3: read_deepseek_v3(text, s); break;
    default: s.content = std::string(text);
  }
  if (inline_reasoning_ && s.had_reasoning) {
    s.content = std::string(kThinkOpen) + s.reasoning + (s.reasoning_closed ? std::string(kThinkClose) + s.content : "");
    s.reasoning.clear();
  }

  std::vector<ReplyDelta> out;
  auto grow = [&](std::string& sent, const std::string& now, ReplyDelta::Kind kind, size_t index) {
    std::string more = extension(sent, now);
    if (more.empty()) return;
    sent += more;
    ReplyDelta d;
    d.kind = kind;
    d.text = std::move(more);
    d.index = index;
    out.push_back(std::move(d));
  };
  grow(reply_.reasoning, s.reasoning, ReplyDelta::Kind::Reasoning, 0);
  grow(reply_.content, s.content, ReplyDelta::Kind::Content, 0);
  for (size_t i = 0; i < s.calls.size(); ++i) {
    if (i == reply_.tool_calls.size()) {
      reply_.tool_calls.push_back({s.calls[i].id, s.calls[i].name, ""});
      ReplyDelta d;
      d.kind = ReplyDelta::Kind::ToolCall;
      d.index = i;
      d.call = reply_.tool_calls.back();
      out.push_back(std::move(d));
    }
    grow(reply_.tool_calls[i].arguments, s.calls[i].arguments, ReplyDelta::Kind::Arguments, i);
  }
  return out;
}

}  // namespace deltafin
