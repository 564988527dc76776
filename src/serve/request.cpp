// Request parsing (see request.hpp), with simdjson's DOM: each field is looked up once and its
// type checked; null counts as absent.
#include "serve/request.hpp"

#include <simdjson.h>

#include <fmt/format.h>

#include <limits>

#include "serve/api_error.hpp"
#include "serve/chat_request.hpp"
#include "serve/json_fields.hpp"

namespace deltafin::serve {
namespace {

using namespace json_fields;
using simdjson::dom::element;
using simdjson::dom::element_type;

constexpr size_t kMaxStops = 4;  // OpenAI's limit

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
  parse_chat_fields(root, r);
  return r;
}

const JsonValue* CompletionRequest::tool_function(const std::string& name) const {
  if (!tools) return nullptr;
  for (const JsonValue& tool : tools->items()) {
    const JsonValue* function = tool.find("function");
    const JsonValue* n = function ? function->find("name") : nullptr;
    if (n && n->is_string() && n->as_string() == name) return function;
  }
  return nullptr;
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
