// Request parsing (see request.hpp), with simdjson's DOM: each field is looked up once and its
// type checked; null counts as absent.
#include "serve/request.hpp"

#include <simdjson.h>

#include <fmt/format.h>

#include <limits>

#include "serve/api_error.hpp"

namespace deltafin::serve {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

constexpr size_t kMaxStops = 4;  // OpenAI's limit

[[noreturn]] void bad_field(const std::string& field, const std::string& expected) {
  throw ApiError(400, fmt::format("'{}' must be {}", field, expected), field);
}

// The field, or nullopt when absent or null.
std::optional<element> field(element object, const char* name) {
  element value;
  if (object[name].get(value) != simdjson::SUCCESS || value.type() == element_type::NULL_VALUE) return std::nullopt;
  return value;
}

std::string string_field(element value, const std::string& name) {
  std::string_view s;
  if (value.get_string().get(s) != simdjson::SUCCESS) bad_field(name, "a string");
  return std::string(s);
}

double number_field(element value, const std::string& name, double lo, double hi, const char* range) {
  double x;
  if (value.get_double().get(x) != simdjson::SUCCESS) bad_field(name, "a number");
  if (!(x >= lo && x <= hi)) bad_field(name, range);
  return x;
}

// An integer from lo to hi. JSON integers past int64 (simdjson: UINT64) are out of range, not
// wrapped; a number with a fraction or exponent is not an integer.
int64_t integer_field(element value, const std::string& name, int64_t lo, int64_t hi) {
  const std::string range = fmt::format("an integer from {} to {}", lo, hi);
  if (value.type() == element_type::UINT64) bad_field(name, range);
  int64_t x;
  if (value.type() != element_type::INT64 || value.get_int64().get(x) != simdjson::SUCCESS) bad_field(name, range);
  if (x < lo || x > hi) bad_field(name, range);
  return x;
}

bool bool_field(element value, const std::string& name) {
  bool b;
  if (value.get_bool().get(b) != simdjson::SUCCESS) bad_field(name, "a boolean");
  return b;
}

// Log probabilities are not returned: a request for them (true, or a count above 0) is refused
// rather than answered without them.
void refuse_logprobs(element value, const std::string& name) {
  bool b = false;
  int64_t n = 0;
  if (value.get_bool().get(b) == simdjson::SUCCESS) {
    if (b) bad_field(name, "false or absent (this server returns no log probabilities)");
  } else if (value.type() != element_type::INT64 || value.get_int64().get(n) != simdjson::SUCCESS || n != 0) {
    bad_field(name, "0, false or absent (this server returns no log probabilities)");
  }
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string message_content(element value, const std::string& name) {
  if (value.type() == element_type::STRING) return string_field(value, name);
  simdjson::dom::array parts;
  if (value.get_array().get(parts) != simdjson::SUCCESS) bad_field(name, "a string or an array of text parts");
  std::string text;
  size_t i = 0;
  for (element part : parts) {
    const std::string part_name = fmt::format("{}[{}]", name, i++);
    const auto type = field(part, "type");
    const auto part_text = field(part, "text");
    if (part.type() != element_type::OBJECT || !type || string_field(*type, part_name + ".type") != "text" || !part_text)
      bad_field(part_name, "a text part {\"type\": \"text\", \"text\": ...} (this server reads text only)");
    text += string_field(*part_text, part_name + ".text");
  }
  return text;
}

element parse_object(simdjson::dom::parser& parser, std::string_view body) {
  element root;
  if (auto err = parser.parse(body.data(), body.size()).get(root))
    throw ApiError(400, fmt::format("the body is not valid JSON ({})", simdjson::error_message(err)));
  if (root.type() != element_type::OBJECT) throw ApiError(400, "the body must be a JSON object");
  return root;
}

// The fields both endpoints share.
void parse_common(element root, CompletionRequest& r) {
  if (auto v = field(root, "model")) r.model = string_field(*v, "model");
  if (auto v = field(root, "stream")) r.stream = bool_field(*v, "stream");
  if (auto v = field(root, "stream_options")) {
    if (v->type() != element_type::OBJECT) bad_field("stream_options", "an object");
    if (auto u = field(*v, "include_usage")) r.include_usage = bool_field(*u, "stream_options.include_usage");
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();  // the context check bounds it further
  for (const char* name : {"max_tokens", "max_completion_tokens"})
    if (auto v = field(root, name)) {
      r.max_tokens = integer_field(*v, name, 0, kMax);
      r.max_tokens_field = name;
    }
  r.sampler.temperature = 1.0f;  // OpenAI's default
  if (auto v = field(root, "temperature")) r.sampler.temperature = static_cast<float>(number_field(*v, "temperature", 0, 2, "between 0 and 2"));
  if (auto v = field(root, "top_p"))
    r.sampler.top_p = static_cast<float>(number_field(*v, "top_p", 0, 1, "between 0 and 1"));
  if (r.sampler.top_p <= 0) bad_field("top_p", "greater than 0");
  if (auto v = field(root, "top_k")) r.sampler.top_k = integer_field(*v, "top_k", 0, kMax);  // 0: off; past the vocabulary: all
  if (auto v = field(root, "seed")) r.sampler.seed = static_cast<uint64_t>(integer_field(*v, "seed", 0, kMax));
  if (auto v = field(root, "n"); v && (v->type() != element_type::INT64 || v->get_int64().value_unsafe() != 1))
    bad_field("n", "1 (one choice per request)");
  if (auto v = field(root, "stop")) {
    if (v->type() == element_type::STRING) {
      r.stops.push_back(string_field(*v, "stop"));
    } else {
      simdjson::dom::array stops;
      if (v->get_array().get(stops) != simdjson::SUCCESS) bad_field("stop", "a string or an array of strings");
      if (stops.size() > kMaxStops) bad_field("stop", fmt::format("at most {} strings", kMaxStops));
      for (element s : stops) r.stops.push_back(string_field(s, "stop"));
    }
    for (const std::string& s : r.stops)
      if (s.empty()) bad_field("stop", "non-empty strings");
  }
}

}  // namespace

CompletionRequest parse_chat_request(std::string_view body) {
  simdjson::dom::parser parser;
  const element root = parse_object(parser, body);
  CompletionRequest r;
  r.chat = true;
  parse_common(root, r);
  for (const char* name : {"logprobs", "top_logprobs"})
    if (auto v = field(root, name)) refuse_logprobs(*v, name);
  const auto messages = field(root, "messages");
  if (!messages) throw ApiError(400, "'messages' is required", "messages");
  simdjson::dom::array list;
  if (messages->get_array().get(list) != simdjson::SUCCESS) bad_field("messages", "an array");
  size_t i = 0;
  for (element m : list) {
    const std::string name = fmt::format("messages[{}]", i++);
    if (m.type() != element_type::OBJECT) bad_field(name, "an object");
    const auto role = field(m, "role");
    if (!role) throw ApiError(400, fmt::format("'{}.role' is required", name), name + ".role");
    ChatMessage message;
    message.role = string_field(*role, name + ".role");
    if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
    if (message.role != "system" && message.role != "user" && message.role != "assistant")
      bad_field(name + ".role", "\"system\", \"user\" or \"assistant\"");
    if (auto content = field(m, "content")) message.content = message_content(*content, name + ".content");
    r.messages.push_back(std::move(message));
  }
  if (r.messages.empty()) bad_field("messages", "a non-empty array");
  return r;
}

CompletionRequest parse_completion_request(std::string_view body) {
  simdjson::dom::parser parser;
  const element root = parse_object(parser, body);
  CompletionRequest r;
  parse_common(root, r);
  if (auto v = field(root, "logprobs")) refuse_logprobs(*v, "logprobs");
  const auto prompt = field(root, "prompt");
  if (!prompt) throw ApiError(400, "'prompt' is required", "prompt");
  if (prompt->type() == element_type::ARRAY) {  // one prompt in an array; token arrays and batches are refused
    simdjson::dom::array list = prompt->get_array().value_unsafe();
    if (list.size() != 1 || list.at(0).value_unsafe().type() != element_type::STRING)
      bad_field("prompt", "a string (or an array of exactly one string)");
    r.prompt = string_field(list.at(0).value_unsafe(), "prompt");
  } else {
    r.prompt = string_field(*prompt, "prompt");
  }
  if (r.prompt.empty()) bad_field("prompt", "a non-empty string");
  return r;
}

}  // namespace deltafin::serve
