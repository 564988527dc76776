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
const char* finish_reason(const GenerationResult& r) { return r.finish_reason == "stop" ? "stop" : "length"; }

std::string object_head(const ResponseHeader& h, const char* object) {
  return fmt::format("\"id\": {}, \"object\": \"{}\", \"created\": {}, \"model\": {}", json_string(h.id), object,
                     h.created, json_string(h.model));
}

std::string event(const std::string& json) { return "data: " + json + "\n\n"; }

}  // namespace

std::string completion_json(const ResponseHeader& h, const GenerationResult& r) {
  const std::string choice =
      h.chat ? fmt::format("{{\"index\": 0, \"message\": {{\"role\": \"assistant\", \"content\": {}}}, "
                           "\"logprobs\": null, \"finish_reason\": \"{}\"}}",
                           json_string(r.text), finish_reason(r))
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
