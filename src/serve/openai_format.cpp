// OpenAI response formatting (see openai_format.hpp), with fmt and json_string as the rest of
// the project writes JSON.
#include "serve/openai_format.hpp"

#include <fmt/format.h>

#include "util/ids_hash.hpp"
#include "util/json_string.hpp"

namespace deltafin::serve {
namespace {

std::string usage_json(const GenerationResult& r) {
  const int64_t completion = static_cast<int64_t>(r.ids.size());
  return fmt::format(
      "{{\"prompt_tokens\": {}, \"completion_tokens\": {}, \"total_tokens\": {}, "
      "\"prompt_tokens_details\": {{\"cached_tokens\": {}}}}}",
      r.prompt_tokens, completion, r.prompt_tokens + completion, r.reused_tokens);
}

// OpenAI's finish reasons; a cancelled generation is only ever seen by a client that stayed (a
// shutdown answers with an error instead), so it never reaches here.
const char* finish_reason(const GenerationResult& r) {
  return r.finish_reason == "stop" ? "stop" : r.finish_reason == "tool_calls" ? "tool_calls" : "length";
}

// The assistant's message: content (null when the reply is only tool calls), then the reasoning
// and the tool calls when there are any.
std::string message_json(const Reply& reply) {
  std::string out = fmt::format("{{\"role\": \"assistant\", \"content\": {}",
                                reply.content.empty() && !reply.tool_calls.empty() ? "null" : json_string(reply.content));
  if (!reply.reasoning.empty()) out += fmt::format(", \"reasoning_content\": {}", json_string(reply.reasoning));
  if (!reply.tool_calls.empty()) {
    out += ", \"tool_calls\": [";
    for (size_t i = 0; i < reply.tool_calls.size(); ++i) out += (i ? ", " : "") + tool_call_json(reply.tool_calls[i]);
    out += "]";
  }
  return out + "}";
}

std::string object_head(const ResponseHeader& h, const char* object) {
  return fmt::format("\"id\": {}, \"object\": \"{}\", \"created\": {}, \"model\": {}", json_string(h.id), object,
                     h.created, json_string(h.model));
}

std::string event(const std::string& json) { return "data: " + json + "\n\n"; }

}  // namespace

std::string completion_json(const ResponseHeader& h, const GenerationResult& r, const Reply* reply) {
  const std::string choice =
      reply ? fmt::format("{{\"index\": 0, \"message\": {}, \"logprobs\": null, \"finish_reason\": \"{}\"}}",
                          message_json(*reply), finish_reason(r))
             : fmt::format("{{\"index\": 0, \"text\": {}, \"logprobs\": null, \"finish_reason\": \"{}\"}}",
                           json_string(r.text), finish_reason(r));
  return fmt::format("{{{}, \"system_fingerprint\": \"{}\", \"choices\": [{}], \"usage\": {}}}",
                     object_head(h, h.chat ? "chat.completion" : "text_completion"), ids_hash_text(r.ids), choice,
                     usage_json(r));
}

std::string text_chunk_event(const ResponseHeader& h, const std::string& text, bool first) {
  const std::string choice =
      h.chat ? fmt::format("{{\"index\": 0, \"delta\": {{{}\"content\": {}}}, \"logprobs\": null, \"finish_reason\": null}}",
                           first ? "\"role\": \"assistant\", " : "", json_string(text))
             : fmt::format("{{\"index\": 0, \"text\": {}, \"logprobs\": null, \"finish_reason\": null}}", json_string(text));
  return event(fmt::format("{{{}, \"system_fingerprint\": null, \"choices\": [{}]}}",
                           object_head(h, h.chat ? "chat.completion.chunk" : "text_completion"), choice));
}

std::string delta_chunk_event(const ResponseHeader& h, const ReplyDelta& d, bool first) {
  std::string delta = first ? "\"role\": \"assistant\", " : "";
  switch (d.kind) {
    case ReplyDelta::Kind::Reasoning: delta += "\"reasoning_content\": " + json_string(d.text); break;
    case ReplyDelta::Kind::Content: delta += "\"content\": " + json_string(d.text); break;
    case ReplyDelta::Kind::ToolCall:
      delta += fmt::format("\"tool_calls\": [{{\"index\": {}, \"id\": {}, \"type\": \"function\", \"function\": "
                           "{{\"name\": {}, \"arguments\": \"\"}}}}]",
                           d.index, json_string(d.call.id), json_string(d.call.name));
      break;
    case ReplyDelta::Kind::Arguments:
      delta += fmt::format("\"tool_calls\": [{{\"index\": {}, \"function\": {{\"arguments\": {}}}}}]", d.index, json_string(d.text));
  }
  return event(fmt::format("{{{}, \"system_fingerprint\": null, \"choices\": [{{\"index\": 0, \"delta\": {{{}}}, "
                           "\"logprobs\": null, \"finish_reason\": null}}]}}",
                           object_head(h, "chat.completion.chunk"), delta));
}

std::string final_chunk_events(const ResponseHeader& h, const GenerationResult& r, bool include_usage) {
  const char* object = h.chat ? "chat.completion.chunk" : "text_completion";
  const std::string choice =
      h.chat ? fmt::format("{{\"index\": 0, \"delta\": {{}}, \"logprobs\": null, \"finish_reason\": \"{}\"}}", finish_reason(r))
             : fmt::format("{{\"index\": 0, \"text\": \"\", \"logprobs\": null, \"finish_reason\": \"{}\"}}", finish_reason(r));
  const std::string fingerprint = ids_hash_text(r.ids);
  std::string out = event(fmt::format("{{{}, \"system_fingerprint\": \"{}\", \"choices\": [{}]}}", object_head(h, object),
                                      fingerprint, choice));
  if (include_usage)
    out += event(fmt::format("{{{}, \"system_fingerprint\": \"{}\", \"choices\": [], \"usage\": {}}}", object_head(h, object),
                             fingerprint, usage_json(r)));
  return out;
}

std::string tool_call_json(const ToolCall& c) {
  return fmt::format("{{\"id\": {}, \"type\": \"function\", \"function\": {{\"name\": {}, \"arguments\": {}}}}}",
                     json_string(c.id), json_string(c.name), json_string(c.arguments));
}

std::string error_json(const ApiError& e) {
  return fmt::format("{{\"error\": {{\"message\": {}, \"type\": {}, \"param\": {}, \"code\": null}}}}", json_string(e.what()),
                     json_string(e.type), e.param.empty() ? std::string("null") : json_string(e.param));
}

std::string error_event(const ApiError& e) { return event(error_json(e)); }

std::string models_json(const std::string& model, int64_t created) {
  return fmt::format("{{\"object\": \"list\", \"data\": [{{\"id\": {}, \"object\": \"model\", \"created\": {}, \"owned_by\": \"deltafin\"}}]}}",
                     json_string(model), created);
}

}  // namespace deltafin::serve
