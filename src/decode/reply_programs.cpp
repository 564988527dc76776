// The reply programs of each chat family (see reply_programs.hpp).
#include "decode/reply_programs.hpp"

#include "text/composite_matchers.hpp"
#include "text/json_matcher.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

// Appends steps; each leads to the one appended after it unless told otherwise.
class Builder {
 public:
  explicit Builder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  int32_t id(const char* text) const {
    const auto id = tokenizer_.special_id(text);
    if (!id) fail("the vocabulary has no '{}', which this chat format's replies need", text);
    return *id;
  }
  int size() const { return static_cast<int>(program.steps.size()); }
  ReplyStep& at(int step) { return program.steps[static_cast<size_t>(step)]; }

  // A control token, leading to the next step.
  int token(const char* text) { return add(special_step({{id(text), size() + 1}})); }
  // A choice of control tokens, edges filled in by the caller.
  int branch() { return add(special_step({})); }
  // Free text until `text`'s control token.
  int free_until(const char* text) {
    ReplyStep s;
    s.kind = ReplyStep::Kind::Free;
    s.edges = {{id(text), size() + 1}};
    return add(std::move(s));
  }
  int text(std::function<std::unique_ptr<ByteMatcher>(const ReplyState&)> make,
           std::function<void(ByteMatcher&, ReplyState&)> done = nullptr) {
    ReplyStep s;
    s.kind = ReplyStep::Kind::Text;
    s.make = std::move(make);
    s.done = std::move(done);
    s.next = size() + 1;
    return add(std::move(s));
  }
  int literal(std::string text, bool optional = false) {
    return this->text([text, optional](const ReplyState&) { return std::make_unique<LiteralMatcher>(text, optional); });
  }
  int end() {
    ReplyStep s;
    s.kind = ReplyStep::Kind::End;
    return add(std::move(s));
  }

  ReplyProgram program;

 private:
  static ReplyStep special_step(std::vector<ReplyStep::Edge> edges) {
    ReplyStep s;
    s.kind = ReplyStep::Kind::Special;
    s.edges = std::move(edges);
    return s;
  }
  int add(ReplyStep s) {
    program.steps.push_back(std::move(s));
    return size() - 1;
  }
  const Tokenizer& tokenizer_;
};

using Tools = std::shared_ptr<const std::vector<ReplyTool>>;  // (shared by the steps' matcher makers)

std::unique_ptr<ByteMatcher> json(const std::shared_ptr<const CompiledSchema>& schema) {
  return std::make_unique<JsonMatcher>(schema);
}

const std::shared_ptr<const CompiledSchema>& parameters_of(const std::vector<ReplyTool>& tools, const std::string& name) {
  for (const ReplyTool& t : tools)
    if (t.name == name) return t.parameters;
  fail("constrained reply: no tool is named '{}'", name);
}

// A text naming one of the tools: `prefix NAME suffix` for each, the chosen one recorded.
int tool_name(Builder& b, Tools tools, std::function<std::string(const std::string&, int)> text) {
  return b.text(
      [tools, text](const ReplyState& state) {
        std::vector<std::unique_ptr<ByteMatcher>> names;
        for (const ReplyTool& t : *tools) names.push_back(std::make_unique<LiteralMatcher>(text(t.name, state.calls)));
        return std::make_unique<UnionMatcher>(std::move(names));
      },
      [tools](ByteMatcher& m, ReplyState& state) { state.tool = (*tools)[static_cast<size_t>(static_cast<UnionMatcher&>(m).chosen())].name; });
}

// The arguments of the call being written (under its tool's parameters).
int arguments(Builder& b, Tools tools) {
  return b.text([tools](const ReplyState& state) { return json(parameters_of(*tools, state.tool)); },
                [](ByteMatcher&, ReplyState& state) { ++state.calls; });
}

// Kimi K2(-Thinking): [<think> free </think>] <|tool_calls_section_begin|> (<|tool_call_begin|>
// functions.NAME:I <|tool_call_argument_begin|> ARGS <|tool_call_end|>)+ <|tool_calls_section_end|>
ReplyProgram k2_tools(Builder& b, Tools tools, bool parallel, bool thinking) {
  const int start = thinking ? b.branch() : -1;
  const int reasoning = thinking ? b.free_until("</think>") : -1;
  const int section = b.token("<|tool_calls_section_begin|>");
  b.token("<|tool_call_begin|>");
  const int name = tool_name(b, tools, [](const std::string& n, int i) { return "functions." + n + ":" + std::to_string(i); });
  b.token("<|tool_call_argument_begin|>");
  arguments(b, tools);
  b.token("<|tool_call_end|>");
  const int after = b.branch();
  const int end = b.end();
  b.at(after).edges.push_back({b.id("<|tool_calls_section_end|>"), end});
  if (parallel) b.at(after).edges.push_back({b.id("<|tool_call_begin|>"), name});
  if (thinking) b.at(start).edges = {{b.id("<think>"), reasoning}, {b.id("<|tool_calls_section_begin|>"), section + 1}};
  b.program.start = thinking ? start : section;
  return std::move(b.program);
}

// Kimi K3: [reasoning <|close|>think<|sep|> <|open|>response<|sep|>] <|close|>response<|sep|>
// <|open|>tools<|sep|> (<|open|>call tool="NAME" index="I"<|sep|> <|open|>json type="object"<|sep|>
// ARGS <|close|>json<|sep|> <|close|>call<|sep|>)+ <|close|>tools<|sep|> <|close|>message<|sep|>
int k3_reasoning(Builder& b) {
  const int start = b.free_until("<|close|>");
  b.literal("think");
  b.token("<|sep|>");
  b.token("<|open|>");
  b.literal("response");
  b.token("<|sep|>");
  return start;
}

void k3_message_end(Builder& b) {
  b.token("<|close|>");
  b.literal("message");
  b.token("<|sep|>");
  b.end();
}

ReplyProgram k3_tools(Builder& b, Tools tools, bool parallel, bool thinking) {
  const int start = thinking ? k3_reasoning(b) : b.size();
  b.token("<|close|>");  // a forced call's answer is empty, as OpenAI's is
  b.literal("response");
  b.token("<|sep|>");
  b.token("<|open|>");
  b.literal("tools");
  b.token("<|sep|>");
  b.token("<|open|>");
  const int call = tool_name(b, tools, [](const std::string& n, int i) {
    return "call tool=\"" + n + "\" index=\"" + std::to_string(i + 1) + "\"";  // (tool names need no escaping)
  });
  b.token("<|sep|>");
  b.token("<|open|>");
  b.literal("json type=\"object\"");
  b.token("<|sep|>");
  arguments(b, tools);
  b.token("<|close|>");
  b.literal("json");
  b.token("<|sep|>");
  b.token("<|close|>");
  b.literal("call");
  b.token("<|sep|>");
  const int after = b.branch();
  b.at(after).edges.push_back({b.id("<|close|>"), b.size()});
  if (parallel) b.at(after).edges.push_back({b.id("<|open|>"), call});
  b.literal("tools");
  b.token("<|sep|>");
  k3_message_end(b);
  b.program.start = start;
  return std::move(b.program);
}

// DeepSeek-V3: <｜tool▁calls▁begin｜> (<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```
// <｜tool▁call▁end｜>)+ (calls joined by "\n") <｜tool▁calls▁end｜>
ReplyProgram deepseek_v3_tools(Builder& b, Tools tools, bool parallel) {
  b.token("<｜tool▁calls▁begin｜>");
  b.token("<｜tool▁call▁begin｜>");
  const int function = b.literal("function");
  b.token("<｜tool▁sep｜>");
  b.text(
      [tools](const ReplyState&) {
        std::vector<std::unique_ptr<ByteMatcher>> calls;
        for (const ReplyTool& t : *tools) {
          std::vector<std::unique_ptr<ByteMatcher>> parts;
          parts.push_back(std::make_unique<LiteralMatcher>(t.name + "\n```json\n"));
          parts.push_back(json(t.parameters));
          parts.push_back(std::make_unique<LiteralMatcher>("\n```"));
          calls.push_back(std::make_unique<SequenceMatcher>(std::move(parts)));
        }
        return std::make_unique<UnionMatcher>(std::move(calls));
      },
      [](ByteMatcher&, ReplyState& state) { ++state.calls; });
  b.token("<｜tool▁call▁end｜>");
  if (parallel) b.literal("\n", true);
  const int after = b.branch();
  const int end = b.end();
  b.at(after).edges.push_back({b.id("<｜tool▁calls▁end｜>"), end});
  if (parallel) b.at(after).edges.push_back({b.id("<｜tool▁call▁begin｜>"), function});
  return std::move(b.program);
}

}  // namespace

ReplyProgram tool_call_program(ChatStyle style, const Tokenizer& tokenizer, const std::vector<ReplyTool>& tools, bool parallel,
                               bool thinking) {
  Builder b(tokenizer);
  const Tools shared = std::make_shared<const std::vector<ReplyTool>>(tools);
  switch (style) {
    case ChatStyle::KimiK2: return k2_tools(b, shared, parallel, false);
    case ChatStyle::KimiK2Thinking: return k2_tools(b, shared, parallel, true);
    case ChatStyle::KimiK3: return k3_tools(b, shared, parallel, thinking);
    case ChatStyle::DeepSeekV3: return deepseek_v3_tools(b, shared, parallel);
    default: fail("the {} chat format has no tool calls", chat_style_name(style));
  }
}

ReplyProgram structured_output_program(ChatStyle style, const Tokenizer& tokenizer, std::shared_ptr<const CompiledSchema> schema,
                                       bool thinking) {
  Builder b(tokenizer);
  auto document = [&] { return b.text([schema](const ReplyState&) { return json(schema); }); };
  if (style == ChatStyle::KimiK3) {
    const int start = thinking ? k3_reasoning(b) : b.size();
    document();
    k3_message_end(b);
    b.program.start = start;
  } else {
    if (style == ChatStyle::KimiK2Thinking) {  // (it always thinks first)
      b.token("<think>");
      b.free_until("</think>");
    }
    document();
    b.end();
  }
  return std::move(b.program);
}

}  // namespace deltafin
