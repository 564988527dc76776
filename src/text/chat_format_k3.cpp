// Kimi K3's XTML chat format, rendered as its official template does (docs/chat-formats.md) with
// thinking_effort unset (no thinking-effort message, as Moonshot's encoder):
//   tools         <|open|>message role="system" type="tool-declare"<|sep|># Tools ... ```json\nJSON\n```
//                 <|close|>message<|sep|><|end_of_msg|>   (compact JSON, keys sorted as Jinja's dictsort)
//   assistant     [<|open|>think<|sep|>REASONING<|close|>think<|sep|>] <|open|>response<|sep|>TEXT
//                 <|close|>response<|sep|> [<|open|>tools<|sep|> <|open|>call tool="NAME" index="1"<|sep|>
//                 <|open|>json type="object"<|sep|>ARGS<|close|>json<|sep|> <|close|>call<|sep|> ...
//                 <|close|>tools<|sep|>]
//   tool results  <|open|>message role="tool" tool="NAME" index="I"<|sep|>RESULT<|close|>message<|sep|><|end_of_msg|>
//   tool_choice required/none and response_format: internal system messages after the conversation.
// Segments: tag names, ' key', '="', the escaped value and '"' are separate text pieces.
#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include "text/chat_segments.hpp"
#include "util/error.hpp"
#include "util/json_value.hpp"

namespace deltafin {
namespace {

using Attributes = std::vector<std::pair<std::string, std::string>>;

std::string escape_attr(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Jinja's dictsort (the template's json_sorted): keys compared case-insensitively (ASCII letters
// here), equal ones keeping their order. Python's sort_keys would order "Zeta" before "alpha".
JsonValue sorted_keys(const JsonValue& v) {
  JsonValue out = v;
  if (v.is_object()) {
    for (JsonValue::Member& m : out.members()) m.second = sorted_keys(m.second);
    std::stable_sort(out.members().begin(), out.members().end(),
                     [](const JsonValue::Member& a, const JsonValue::Member& b) { return ascii_lower(a.first) < ascii_lower(b.first); });
  } else if (v.is_array()) {
    for (JsonValue& item : out.items()) item = sorted_keys(item);
  }
  return out;
}

std::string json_sorted(const JsonValue* v) {
  JsonWriteStyle compact;
  compact.compact = true;
  return v == nullptr ? "null" : write_json(sorted_keys(*v), compact);
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

class K3Writer {
 public:
  void open(const std::string& tag, const Attributes& attrs = {}) {
    w_.special("<|open|>");
    w_.text(tag);
    for (const auto& [key, value] : attrs) {
      w_.text(" " + key);
      w_.text("=\"");
      w_.text(escape_attr(value));
      w_.text("\"");
    }
    w_.special("<|sep|>");
  }
  void close(const std::string& tag) {
    w_.special("<|close|>");
    w_.text(tag);
    w_.special("<|sep|>");
  }
  void message(const Attributes& attrs, const std::string& body) {
    open("message", attrs);
    w_.text(body);
    close("message");
    end_of_message();
  }
  void end_of_message() { w_.special("<|end_of_msg|>"); }
  void text(const std::string& s) { w_.text(s); }
  std::vector<PromptSegment> take() { return w_.take(); }

 private:
  SegmentWriter w_{false};
};

Attributes role_attrs(const ChatMessage& m) {
  Attributes attrs{{"role", m.role}};
  if (!m.name.empty()) attrs.emplace_back("name", m.name);
  return attrs;
}

void render_assistant(K3Writer& k3, const ChatMessage& m, bool thinking) {
  k3.open("message", role_attrs(m));
  if (thinking) {
    k3.open("think");
    if (!blank(m.reasoning_content)) k3.text(m.reasoning_content);
    k3.close("think");
  }
  k3.open("response");
  k3.text(m.content);
  k3.close("response");
  if (!m.tool_calls.empty()) {
    k3.open("tools");
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
      const ToolCall& call = m.tool_calls[i];
      k3.open("call", {{"tool", call.name}, {"index", std::to_string(i + 1)}});
      if (!blank(call.arguments)) {  // the JSON text as the client sent it (blank: no block)
        k3.open("json", {{"type", "object"}});
        k3.text(call.arguments);
        k3.close("json");
      }
      k3.close("call");
    }
    k3.close("tools");
  }
  k3.close("message");
  k3.end_of_message();
}

// The latest assistant message's calls and how many tool results have followed it.
struct ToolState {
  const std::vector<ToolCall>* calls = nullptr;
  int index = 0;
};

void render_tool_result(K3Writer& k3, const ChatMessage& m, ToolState& state, const std::string* resolved_name) {
  ++state.index;
  std::string name;
  if (resolved_name != nullptr) name = *resolved_name;
  else if (!m.name.empty()) name = m.name;
  else if (state.calls != nullptr && state.index <= static_cast<int>(state.calls->size())) name = (*state.calls)[state.index - 1].name;
  else fail("chat format (Kimi K3): a tool message has no name and answers no tool call of the assistant message before it");
  k3.message({{"role", "tool"}, {"tool", name}, {"index", std::to_string(state.index)}}, m.content);
}

bool answers_a_call(const ChatMessage& m, const ToolState& state) {
  if (m.tool_call_id.empty() || state.calls == nullptr) return false;
  return std::any_of(state.calls->begin(), state.calls->end(), [&](const ToolCall& c) { return c.id == m.tool_call_id; });
}

// A run of tool messages: in the order of the calls they answer when every one answers a call of the
// latest assistant message, else as they come, each named by its `name` or the call at its position.
void render_tool_run(K3Writer& k3, const std::vector<const ChatMessage*>& run, ToolState& state) {
  if (std::all_of(run.begin(), run.end(), [&](const ChatMessage* m) { return answers_a_call(*m, state); })) {
    std::set<std::string> emitted;
    for (const ToolCall& call : *state.calls) {
      if (call.id.empty() || !emitted.insert(call.id).second) continue;
      for (const ChatMessage* m : run)
        if (m->tool_call_id == call.id) render_tool_result(k3, *m, state, &call.name);
    }
  } else {
    for (const ChatMessage* m : run) render_tool_result(k3, *m, state, nullptr);
  }
}

}  // namespace

std::vector<PromptSegment> render_kimi_k3(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  K3Writer k3;
  if (declares_tools(options))
    k3.message({{"role", "system"}, {"type", "tool-declare"}},
               "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" + json_sorted(options.tools) + "\n```");
  ToolState state;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || m.role == "system") {
      k3.message(role_attrs(m), m.content);
    } else if (m.role == "assistant") {
      state.calls = &m.tool_calls;
      state.index = 0;
      render_assistant(k3, m, options.thinking);
    } else if (m.role == "tool" && (i == 0 || messages[i - 1].role != "tool")) {
      std::vector<const ChatMessage*> run;
      for (size_t j = i; j < messages.size() && messages[j].role == "tool"; ++j) run.push_back(&messages[j]);
      render_tool_run(k3, run, state);
    }
  }
  const Attributes internal_tool_choice{{"role", "system"}, {"type", "tool-choice"}};
  if (options.tool_choice == "required")
    k3.message(internal_tool_choice, "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
  else if (options.tool_choice == "none")
    k3.message(internal_tool_choice, "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
  const Attributes internal_format{{"role", "system"}, {"type", "response-format"}};
  const std::string raw_json = "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";
  if (options.response_format == "json_object")
    k3.message(internal_format, "The system is invoked with `response_format=json_object`.\n" + raw_json);
  else if (options.response_format == "json_schema")
    k3.message(internal_format, "The system is invoked with `response_format=json_schema`.\n" + raw_json +
                                    "\nThe JSON data must match the following schema:\n```json\n" + json_sorted(options.response_schema) + "\n```");
  if (options.add_generation_prompt) {
    k3.open("message", {{"role", "assistant"}});
    k3.open(options.thinking ? "think" : "response");
  }
  return k3.take();
}

}  // namespace deltafin
