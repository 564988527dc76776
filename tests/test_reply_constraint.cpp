// Constrained replies in each chat family's format: a forced tool call and structured output,
// sampled from random logits over a vocabulary of bytes, words and the family's control tokens,
// always make a reply that the reply parser reads back into calls of the allowed tools whose
// arguments parse as JSON with their required keys (or one JSON document); and the parser reads
// each family's own rendering of an assistant turn with tool calls (the chat templates, checked
// against the official Jinja templates in test_chat_templates.cpp) back into those calls.
#include <catch2/catch.hpp>

#include <simdjson.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "decode/reply_programs.hpp"
#include "text/reply_parser.hpp"
#include "text/token_trie.hpp"
#include "util/json_value.hpp"

using namespace deltafin;

namespace {

// Bytes, a few words the models would use, then the control tokens.
class WordTokenizer final : public Tokenizer {
 public:
  explicit WordTokenizer(std::vector<std::string> specials) : specials_(std::move(specials)) {
    for (int b = 0; b < 256; ++b) words_.push_back(std::string(1, static_cast<char>(b)));
    for (const char* w : {"functions", ".get", "_weather", ":0", "{\"", "\":", " \"", "city", "\"}", "Paris", "call tool=\"",
                          "\" index=\"", "json", " type=\"object\"", "response", "think", "message", "tools", "\n```json\n", "\n```"})
      words_.push_back(w);
  }
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string token_bytes(int32_t id) const override {
    return id < static_cast<int32_t>(words_.size()) ? words_[static_cast<size_t>(id)] : specials_.at(static_cast<size_t>(id) - words_.size());
  }
  std::optional<int32_t> special_id(std::string_view text) const override {
    for (size_t i = 0; i < specials_.size(); ++i)
      if (specials_[i] == text) return static_cast<int32_t>(words_.size() + i);
    return std::nullopt;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(words_.size() + specials_.size()); }

 private:
  std::vector<std::string> words_, specials_;
};

struct Family {
  ChatStyle style;
  std::vector<std::string> specials;
  std::vector<std::string> end;  // end-of-turn tokens
  bool thinking = false;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {ChatStyle::KimiK2,
       {"<|im_end|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|im_middle|>"},
       {"<|im_end|>"}},
      {ChatStyle::KimiK2Thinking,
       {"<|im_end|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>"},
       {"<|im_end|>"}},
      {ChatStyle::KimiK3, {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"}, {"<|end_of_msg|>"}, true},
      {ChatStyle::KimiK3, {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"}, {"<|end_of_msg|>"}, false},
      {ChatStyle::DeepSeekV3,
       {"<｜end▁of▁sentence｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
        "<｜tool▁sep｜>"},
       {"<｜end▁of▁sentence｜>"}},
  };
  return f;
}

std::shared_ptr<const CompiledSchema> schema(const char* json) {
  return std::make_shared<const CompiledSchema>(compile_json_schema(parse_json(json), SchemaMode::kLenient));
}

// Samples a reply under the constraint from random logits (words, control tokens and tokens that
// close strings and containers made likelier, so that replies end); returns its text, the end
// token left out.
std::string sample_reply(const Tokenizer& t, TokenConstraint& c, const std::vector<int32_t>& end_ids, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text;
  for (int step = 0; step < 4000 && !c.finished(); ++step) {
    std::vector<float> logits(static_cast<size_t>(t.vocab_size()));
    for (size_t i = 0; i < logits.size(); ++i) {
      const std::string bytes = t.token_bytes(static_cast<int32_t>(i));
      const bool closes = bytes.find_first_of("\"}]") != std::string::npos;
      logits[i] = std::normal_distribution<float>(i >= 256 ? 3.0f : closes ? 4.0f : 0.0f, 2.0f)(rng);
    }
    c.mask(logits);
    std::vector<int32_t> open;
    for (size_t i = 0; i < logits.size(); ++i)
      if (std::isfinite(logits[i])) open.push_back(static_cast<int32_t>(i));
    REQUIRE(!open.empty());
    int32_t best = open.front();
    for (int32_t id : open)
      if (logits[static_cast<size_t>(id)] > logits[static_cast<size_t>(best)]) best = id;
    if (std::find(end_ids.begin(), end_ids.end(), best) != end_ids.end()) return text;
    c.accept(best);
    text += t.token_bytes(best);
  }
  INFO(text.substr(text.size() > 300 ? text.size() - 300 : 0));
  REQUIRE(c.finished());
  return text;
}

}  // namespace

TEST_CASE("forced tool calls in each family's format parse back into valid calls", "[tools]") {
  const std::vector<ReplyTool> tools = {
      {"get_weather", schema(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                                 "additionalProperties": false})")},
      {"get_time", schema(R"({"type": "object", "properties": {"zone": {"enum": ["CET", "UTC"]}, "day": {"type": "integer"}},
                              "required": ["zone"], "additionalProperties": false})")}};
  for (const Family& f : families())
    for (bool parallel : {false, true})
      for (uint64_t seed = 1; seed <= 12; ++seed) {
        WordTokenizer t(f.specials);
        TokenTrie trie(t);
        std::vector<int32_t> end_ids;
        for (const std::string& e : f.end) end_ids.push_back(*t.special_id(e));
        ReplyConstraint c(tool_call_program(f.style, t, tools, parallel, f.thinking), trie, end_ids);
        INFO(chat_style_name(f.style) << " thinking " << f.thinking << " parallel " << parallel << " seed " << seed);
        const std::string text = sample_reply(t, c, end_ids, seed);
        INFO(chat_style_name(f.style) << " thinking " << f.thinking << " parallel " << parallel << ": " << text);
        ReplyParser parser(f.style, f.thinking, false);
        parser.push(text);
        parser.finish();
        const Reply& r = parser.reply();
        REQUIRE(!r.tool_calls.empty());
        if (!parallel) CHECK(r.tool_calls.size() == 1);
        for (const ToolCall& call : r.tool_calls) {
          REQUIRE((call.name == "get_weather" || call.name == "get_time"));
          const JsonValue args = parse_json(call.arguments);
          REQUIRE(args.is_object());
          CHECK(args.find(call.name == "get_weather" ? "city" : "zone") != nullptr);
        }
      }
}

TEST_CASE("structured output in each family's format is one document under the schema", "[structured]") {
  const auto person = schema(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
                                 "required": ["name", "n"], "additionalProperties": false})");
  for (const Family& f : families())
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      WordTokenizer t(f.specials);
      TokenTrie trie(t);
      std::vector<int32_t> end_ids;
      for (const std::string& e : f.end) end_ids.push_back(*t.special_id(e));
      ReplyConstraint c(structured_output_program(f.style, t, person, f.thinking), trie, end_ids);
      const std::string text = sample_reply(t, c, end_ids, seed);
      INFO(chat_style_name(f.style) << ": " << text);
      ReplyParser parser(f.style, f.thinking, false);
      parser.push(text);
      parser.finish();
      const JsonValue doc = parse_json(parser.reply().content);
      REQUIRE(doc.is_object());
      CHECK(doc.members().size() == 2);
      CHECK(doc.find("name")->is_string());
      CHECK(doc.find("n")->type() == JsonValue::Type::Integer);
    }
}

TEST_CASE("the reply parser reads each family's rendering of a turn with tool calls", "[tools]") {
  ChatMessage turn;
  turn.role = "assistant";
  turn.content_null = true;
  turn.tool_calls = {{"functions.get_weather:0", "get_weather", R"({"city": "Paris"})"},
                     {"functions.get_time:1", "get_time", R"({"zone": "CET"})"}};
  const ChatMessage user{"user", "Weather and time in Paris?"};
  for (ChatStyle style : {ChatStyle::KimiK2Thinking, ChatStyle::KimiK3, ChatStyle::DeepSeekV3}) {
    // The rendering of the conversation with and without the turn: the difference is the turn.
    ChatOptions without;
    without.add_generation_prompt = true;
    ChatOptions with = without;
    with.add_generation_prompt = false;
    auto text = [](const std::vector<PromptSegment>& segments) {
      std::string s;
      for (const PromptSegment& p : segments) s += p.text;
      return s;
    };
    const std::string prompt = text(render_chat(style, {user}, without));
    const std::string whole = text(render_chat(style, {user, turn}, with));
    INFO(chat_style_name(style) << ": " << whole);
    // The generation prompt opens the assistant turn (and K3's think block, as thinking is on).
    size_t common = 0;
    while (common < prompt.size() && common < whole.size() && prompt[common] == whole[common]) ++common;
    ReplyParser parser(style, style == ChatStyle::KimiK3 && whole.compare(common, 9, "<|close|>") == 0, false);
    parser.push(whole.substr(common));
    parser.finish();
    const Reply& r = parser.reply();
    REQUIRE(r.tool_calls.size() == 2);
    CHECK(r.tool_calls[0].name == "get_weather");
    CHECK(r.tool_calls[0].arguments == R"({"city": "Paris"})");
    CHECK(r.tool_calls[1].name == "get_time");
    CHECK(r.tool_calls[1].arguments == R"({"zone": "CET"})");
    if (style != ChatStyle::DeepSeekV3) CHECK(r.tool_calls[0].id == "functions.get_weather:0");
  }
}
