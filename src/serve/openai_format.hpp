// OpenAI's response bodies, as JSON text: chat.completion and text_completion objects, their
// streamed chunks (server-sent events "data: {...}\n\n", ending "data: [DONE]\n\n"), the model
// list, and error objects. system_fingerprint carries the generated ids' hash ("xxh3:..."), the
// one the receipt prints; streamed, it is in the last chunks, once the ids are known.
#pragma once

#include <cstdint>
#include <string>

#include "serve/api_error.hpp"
#include "serve/generator.hpp"
#include "text/reply_parser.hpp"

namespace deltafin::serve {

// What every object of one response shares.
struct ResponseHeader {
  std::string id;       // "chatcmpl-N" or "cmpl-N"
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool chat = false;
};

// reply: a chat completion's reply (nullptr: a text completion, whose text is r.text).
std::string completion_json(const ResponseHeader& h, const GenerationResult& r, const Reply* reply);
// A streamed piece of text (chat: the first carries the assistant role).
std::string text_chunk_event(const ResponseHeader& h, const std::string& text, bool first);
// A streamed piece of a chat reply: reasoning, content, a tool call's id and name, or its arguments.
std::string delta_chunk_event(const ResponseHeader& h, const ReplyDelta& delta, bool first);
// The last chunk: finish_reason and the fingerprint; then, when asked, the usage chunk.
std::string final_chunk_events(const ResponseHeader& h, const GenerationResult& r, bool include_usage);
// One tool call as OpenAI writes it: {"id", "type": "function", "function": {"name", "arguments"}}.
std::string tool_call_json(const ToolCall& call);
std::string error_json(const ApiError& e);
std::string error_event(const ApiError& e);
inline constexpr const char* kDoneEvent = "data: [DONE]\n\n";
std::string models_json(const std::string& model, int64_t created);

}  // namespace deltafin::serve
