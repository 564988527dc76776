// The reply parser on scripted replies in each family's format: the reasoning, the answer and the
// tool calls come apart as OpenAI's API returns them, and the deltas, sent piece by piece (one
// byte at a time included), add up to the same reply as the whole text read at once.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "text/reply_parser.hpp"

using namespace deltafin;

namespace {

// What a client assembling the deltas ends with.
Reply assemble(const std::vector<ReplyDelta>& deltas) {
  Reply r;
  for (const ReplyDelta& d : deltas) {
    switch (d.kind) {
      case ReplyDelta::Kind::Reasoning: r.reasoning += d.text; break;
      case ReplyDelta::Kind::Content: r.content += d.text; break;
      case ReplyDelta::Kind::ToolCall:
        REQUIRE(d.index == r.tool_calls.size());
        r.tool_calls.push_back(d.call);
        break;
      case ReplyDelta::Kind::Arguments:
        REQUIRE(d.index < r.tool_calls.size());
        r.tool_calls[d.index].arguments += d.text;
    }
  }
  return r;
}

// Parses `text` whole and in pieces of `step` bytes; both must agree and the deltas add up.
Reply parse(ChatStyle style, const std::string& text, bool reasoning_first = false, bool inline_reasoning = false) {
  Reply whole;
  for (size_t step : {text.size() + 1, size_t{1}, size_t{3}, size_t{7}}) {
    ReplyParser parser(style, reasoning_first, inline_reasoning);
    std::vector<ReplyDelta> deltas;
    for (size_t i = 0; i < text.size(); i += step)
      for (ReplyDelta& d : parser.push(text.substr(i, step))) deltas.push_back(std::move(d));
    for (ReplyDelta& d : parser.finish()) deltas.push_back(std::move(d));
    const Reply r = parser.reply();
    const Reply assembled = assemble(deltas);
    CHECK(assembled.reasoning == r.reasoning);
    CHECK(assembled.content == r.content);
    REQUIRE(assembled.tool_calls.size() == r.tool_calls.size());
    for (size_t i = 0; i < r.tool_calls.size(); ++i) {
      CHECK(assembled.tool_calls[i].id == r.tool_calls[i].id);
      CHECK(assembled.tool_calls[i].name == r.tool_calls[i].name);
      CHECK(assembled.tool_calls[i].arguments == r.tool_calls[i].arguments);
    }
    if (step > text.size()) whole = r;
    else {
      CHECK(r.content == whole.content);
      CHECK(r.reasoning == whole.reasoning);
      CHECK(r.tool_calls.size() == whole.tool_calls.size());
    }
  }
  return whole;
}

}  // namespace

TEST_CASE("Kimi K2 replies: text, then a tool-call section", "[tools]") {
  const Reply r = parse(ChatStyle::KimiK2,
                        "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                        "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
                        "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"CET\"}<|tool_call_end|>"
                        "<|tool_calls_section_end|>");
  CHECK(r.content == "Let me check.");
  REQUIRE(r.tool_calls.size() == 2);
  CHECK(r.tool_calls[0].id == "functions.get_weather:0");
  CHECK(r.tool_calls[0].name == "get_weather");
  CHECK(r.tool_calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK(r.tool_calls[1].name == "get_time");
  CHECK(r.tool_calls[1].arguments == "{\"tz\": \"CET\"}");
}

TEST_CASE("arguments that are not JSON are passed on as the model wrote them", "[tools]") {
  const Reply r = parse(ChatStyle::KimiK2,
                        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{city: Paris"
                        "<|tool_call_end|><|tool_calls_section_end|>");
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0].arguments == "{city: Paris");
  CHECK(r.content.empty());
}

TEST_CASE("a plain answer is all content, and text that only looks like a marker's start is kept", "[tools]") {
  CHECK(parse(ChatStyle::KimiK2, "a <| b <|tool_call").content == "a <| b <|tool_call");
  CHECK(parse(ChatStyle::Plain, "<think>x</think>").content == "<think>x</think>");
}

TEST_CASE("Kimi K2-Thinking: <think> reasoning goes apart, or stays inline when asked", "[tools]") {
  const std::string text = "<think>The user wants weather.</think>Sure.<|tool_calls_section_begin|><|tool_call_begin|>"
                           "functions.w:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
  const Reply r = parse(ChatStyle::KimiK2Thinking, text);
  CHECK(r.reasoning == "The user wants weather.");
  CHECK(r.content == "Sure.");
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0].arguments == "{}");
  const Reply inline_r = parse(ChatStyle::KimiK2Thinking, text, false, true);
  CHECK(inline_r.reasoning.empty());
  CHECK(inline_r.content == "<think>The user wants weather.</think>Sure.");
  CHECK(parse(ChatStyle::KimiK2Thinking, "No thinking here.").content == "No thinking here.");
}

TEST_CASE("Kimi K3: think, response and tools blocks, argument tags become one JSON object", "[tools]") {
  const Reply r = parse(ChatStyle::KimiK3,
                        "Need the weather.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
                        "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
                        "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris \"Nord\"<|close|>argument<|sep|>"
                        "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>"
                        "<|open|>call tool=\"a&quot;b\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{\"x\": [1, 2]}"
                        "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
                        true);
  CHECK(r.reasoning == "Need the weather.");
  CHECK(r.content == "Checking.");
  REQUIRE(r.tool_calls.size() == 2);
  CHECK(r.tool_calls[0].name == "get_weather");
  CHECK(r.tool_calls[0].id == "functions.get_weather:0");
  CHECK(r.tool_calls[0].arguments == "{\"city\": \"Paris \\\"Nord\\\"\", \"days\": 3}");
  CHECK(r.tool_calls[1].name == "a\"b");
  CHECK(r.tool_calls[1].arguments == "{\"x\": [1, 2]}");
  const Reply no_think = parse(ChatStyle::KimiK3, "Hello.<|close|>response<|sep|><|close|>message<|sep|>", false);
  CHECK(no_think.content == "Hello.");
  CHECK(no_think.reasoning.empty());
}

TEST_CASE("DeepSeek-V3: tool calls in fenced JSON", "[tools]") {
  const Reply r = parse(ChatStyle::DeepSeekV3,
                        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
                        "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"
                        "<｜tool▁calls▁end｜>");
  CHECK(r.content.empty());
  REQUIRE(r.tool_calls.size() == 2);
  CHECK(r.tool_calls[0].name == "get_weather");
  CHECK(r.tool_calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK(r.tool_calls[1].name == "get_time");
  CHECK(r.tool_calls[1].id == "functions.get_time:1");
}

TEST_CASE("a reply cut off inside a call keeps what was written", "[tools]") {
  const Reply r = parse(ChatStyle::KimiK2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1");
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0].arguments == "{\"a\": 1");
}
