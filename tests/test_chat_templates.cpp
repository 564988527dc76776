// The chat renderers against the official chat templates: tests/fixtures/chat/<style>.json holds
// what each family's own Jinja template renders for every conversation of the corpus (written by
// tests/chat/render_reference.py with Jinja2; docs/chat-formats.md says how to regenerate them).
// render_chat must give the same text, control tokens written as their text. Cases where the
// template itself raises are counted, not compared. DeepSeek-V3's prompts are also checked id for
// id against its tokenizer run over the rendered template (transformers.js, $DELTAFIN_TEXT_REF).
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "text/hf_bpe_tokenizer.hpp"
#include "text/chat_format.hpp"
#include "tokenizer_test_util.hpp"
#include "util/json_value.hpp"

using namespace deltafin;

namespace {

JsonValue read_fixture(const std::string& name) {
  std::ifstream in(test::fixture("chat/" + name), std::ios::binary);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  return parse_json(text.str());
}

std::string string_member(const JsonValue& object, const char* key) {
  const JsonValue* v = object.find(key);
  return v != nullptr && v->is_string() ? v->as_string() : std::string();
}

// An OpenAI-style message of the corpus as the request parser hands it to render_chat.
ChatMessage to_message(const JsonValue& j) {
  ChatMessage m;
  m.role = string_member(j, "role");
  const JsonValue* content = j.find("content");
  m.content_null = content == nullptr || content->is_null();
  if (!m.content_null) m.content = content->as_string();
  m.name = string_member(j, "name");
  m.reasoning_content = string_member(j, "reasoning_content");
  m.tool_call_id = string_member(j, "tool_call_id");
  if (const JsonValue* calls = j.find("tool_calls"))
    for (const JsonValue& c : calls->items()) {
      const JsonValue& function = *c.find("function");
      m.tool_calls.push_back({string_member(c, "id"), string_member(function, "name"), string_member(function, "arguments")});
    }
  return m;
}

ChatOptions to_options(const JsonValue& j, const JsonValue& tool_sets) {
  ChatOptions o;
  if (const JsonValue* tools = j.find("tools"); tools != nullptr && tools->is_string()) o.tools = tool_sets.find(tools->as_string());
  o.tool_choice = string_member(j, "tool_choice");
  if (const JsonValue* format = j.find("response_format"); format != nullptr && format->is_object()) {
    o.response_format = string_member(*format, "type");
    if (const JsonValue* wrapper = format->find("json_schema")) o.response_schema = wrapper->find("schema");
  }
  o.add_generation_prompt = j.find("add_generation_prompt")->as_bool();
  o.thinking = j.find("thinking")->as_bool();
  return o;
}

std::string joined(const std::vector<PromptSegment>& segments) {
  std::string s;
  for (const PromptSegment& p : segments) s += p.text;
  return s;
}

std::vector<ChatMessage> case_messages(const JsonValue& c) {
  std::vector<ChatMessage> messages;
  for (const JsonValue& m : c.find("messages")->items()) messages.push_back(to_message(m));
  return messages;
}

struct StyleFixture {
  ChatStyle style;
  int raising;  // the corpus's cases where this template raises (see docs/chat-formats.md)
};

}  // namespace

TEST_CASE("chat renders equal the official chat templates on the corpus", "[chat-templates]") {
  // K2-Instruct raises on null content (every tool-calling turn that sends content: null), K3 on a
  // tool result it cannot name, DeepSeek-V3 on an assistant message without content.
  const StyleFixture styles[] = {{ChatStyle::KimiK2, 13}, {ChatStyle::KimiK2Thinking, 0}, {ChatStyle::KimiK3, 1}, {ChatStyle::DeepSeekV3, 1}};
  const JsonValue corpus = read_fixture("conversations.json");
  const std::vector<JsonValue>& corpus_cases = corpus.find("cases")->items();
  for (const StyleFixture& s : styles) {
    const std::string name = chat_style_name(s.style);
    INFO("style " << name);
    const JsonValue fixture = read_fixture(name + ".json");
    const JsonValue& tool_sets = *fixture.find("tool_sets");
    // The fixture was rendered from the corpus as it is now.
    CHECK(tool_sets == *corpus.find("tool_sets"));
    REQUIRE(fixture.find("cases")->items().size() == corpus_cases.size());
    int raised = 0;
    for (size_t i = 0; i < corpus_cases.size(); ++i) {
      const JsonValue& c = fixture.find("cases")->items()[i];
      INFO("case " << c.find("name")->as_string());
      CHECK(*c.find("messages") == *corpus_cases[i].find("messages"));
      const std::vector<ChatMessage> messages = case_messages(c);
      const ChatOptions options = to_options(*c.find("options"), tool_sets);
      if (c.find("error") != nullptr) {
        ++raised;
        if (s.style == ChatStyle::KimiK3) CHECK_THROWS(render_chat(s.style, messages, options));
        continue;
      }
      const std::vector<PromptSegment> segments = render_chat(s.style, messages, options);
      CHECK(joined(segments) == c.find("rendered")->as_string());
      // K2 and DeepSeek-V3: the text between two control tokens is one segment, as their
      // tokenizers split a rendered template only at control tokens.
      if (s.style != ChatStyle::KimiK3)
        for (size_t i = 1; i < segments.size(); ++i) CHECK((segments[i].special || segments[i - 1].special));
    }
    CHECK(raised == s.raising);
  }
}

TEST_CASE("DeepSeek-V3 chat prompts have the ids of its tokenizer run over the rendered template", "[chat-templates]") {
  const std::string ref = test::text_ref_dir("reference_hf.mjs");
  const std::unique_ptr<Tokenizer> tokenizer = load_hf_tokenizer(ref + "/deepseek_v3/tokenizer.json");
  const auto expected = test::read_ref_ids(ref + "/deepseek_v3_chat_ids.json");
  const JsonValue fixture = read_fixture("deepseek-v3.json");
  const std::vector<JsonValue>& cases = fixture.find("cases")->items();
  REQUIRE(expected.size() == cases.size());
  std::set<std::string> differing;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!expected[i]) continue;  // the template raised
    const ChatOptions options = to_options(*cases[i].find("options"), *fixture.find("tool_sets"));
    if (encode_segments(*tokenizer, render_chat(ChatStyle::DeepSeekV3, case_messages(cases[i]), options)) != *expected[i])
      differing.insert(cases[i].find("name")->as_string());
  }
  // Only where message text spells a control token: the tokenizer run over the rendered template
  // turns it into that token, render_chat keeps it text.
  CHECK(differing == std::set<std::string>{"text_like_control_tokens"});
}

TEST_CASE("Kimi K3 writes tags, attributes and values as separate pieces", "[chat-templates]") {
  ChatMessage call{"assistant"};
  call.content_null = true;
  call.tool_calls = {{"call_1", "a&b\"c", "{\"x\": 1}"}};
  ChatMessage result{"tool", "42"};
  result.tool_call_id = "call_1";
  ChatOptions options;
  options.thinking = false;
  options.add_generation_prompt = false;
  const std::vector<PromptSegment> segments = render_chat(ChatStyle::KimiK3, {{"user", "Go"}, call, result}, options);
  std::vector<std::string> pieces;
  for (const PromptSegment& p : segments) pieces.push_back(p.special ? "[" + p.text + "]" : p.text);
  const std::vector<std::string> expected{
      "[<|open|>]", "message", " role", "=\"", "user", "\"", "[<|sep|>]", "Go", "[<|close|>]", "message", "[<|sep|>]", "[<|end_of_msg|>]",
      "[<|open|>]", "message", " role", "=\"", "assistant", "\"", "[<|sep|>]",
      "[<|open|>]", "response", "[<|sep|>]", "[<|close|>]", "response", "[<|sep|>]",
      "[<|open|>]", "tools", "[<|sep|>]",
      "[<|open|>]", "call", " tool", "=\"", "a&amp;b&quot;c", "\"", " index", "=\"", "1", "\"", "[<|sep|>]",
      "[<|open|>]", "json", " type", "=\"", "object", "\"", "[<|sep|>]", "{\"x\": 1}", "[<|close|>]", "json", "[<|sep|>]",
      "[<|close|>]", "call", "[<|sep|>]", "[<|close|>]", "tools", "[<|sep|>]", "[<|close|>]", "message", "[<|sep|>]", "[<|end_of_msg|>]",
      "[<|open|>]", "message", " role", "=\"", "tool", "\"", " tool", "=\"", "a&amp;b&quot;c", "\"", " index", "=\"", "1", "\"", "[<|sep|>]",
      "42", "[<|close|>]", "message", "[<|sep|>]", "[<|end_of_msg|>]"};
  CHECK(pieces == expected);
}
