// Routes and request handling of `deltafin serve` (see http_server.hpp).
#include "serve/http_server.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "serve/chat_turn.hpp"
#include "serve/openai_format.hpp"
#include "serve/request.hpp"
#include "util/error.hpp"
#include "util/ids_hash.hpp"

namespace deltafin::serve {
namespace {

constexpr const char* kJson = "application/json";

struct Route {
  std::string_view path, method;
};
constexpr Route kRoutes[] = {{"/health", "GET"},
                             {"/metrics", "GET"},
                             {"/v1/models", "GET"},
                             {"/v1/chat/completions", "POST"},
                             {"/v1/completions", "POST"}};

const Route* find_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (r.path == path) return &r;
  return nullptr;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ApiError shutting_down_error() { return ApiError(503, "the server is shutting down", "", "server_error"); }

void answer_error(ResponseWriter& writer, const ApiError& error, const HeaderList& extra = {}) {
  writer.send(error.status, kJson, error_json(error), extra);
}

}  // namespace

HttpServer::HttpServer(Generator& generator, const ServerOptions& options, ConnectionLoop& loop)
    : generator_(generator), options_(options), admission_(options.max_waiting), loop_(loop), started_(unix_seconds()) {
  metrics_.set_engine_snapshot(generator_.engine().stats(), generator_.session_stats());
}

void HttpServer::serve() {
  loop_.run([this](const HttpRequest& request, ResponseWriter& writer) { handle(request, writer); },
            [this](const std::string& path, int status) { metrics_.count_request(find_route(path) ? path : "other", status); });
}

void HttpServer::shut_down() {
  shutting_down_ = true;
  admission_.shut_down();
  loop_.stop();
}

bool HttpServer::authorized(const HttpRequest& request) const {
  const std::string& path = request.head.path;
  if (options_.api_key.empty() || (path.rfind("/v1/", 0) != 0 && path != "/metrics")) return true;
  return request.head.header("authorization") == "Bearer " + options_.api_key;
}

void HttpServer::handle(const HttpRequest& request, ResponseWriter& writer) {
  const std::string& path = request.head.path;
  const Route* route = find_route(path);
  if (!authorized(request)) {
    answer_error(writer, ApiError(401, request.head.has_header("authorization") ? "wrong API key" : "an API key is required (Authorization: Bearer KEY)",
                                  "", "authentication_error"));
  } else if (!route) {
    answer_error(writer, ApiError(404, fmt::format("no such endpoint: {}", path)));
  } else if (request.head.method != route->method) {
    answer_error(writer, ApiError(405, fmt::format("{} takes {}, not {}", path, route->method, request.head.method)),
                 {{"Allow", std::string(route->method)}});
  } else if (path == "/health") {
    if (shutting_down_) answer_error(writer, shutting_down_error());
    else writer.send(200, kJson, "{\"status\": \"ok\"}");
  } else if (path == "/metrics") {
    writer.send(200, "text/plain; version=0.0.4", metrics_.render(admission_.running(), admission_.waiting(), options_.memory_budget));
  } else if (path == "/v1/models") {
    writer.send(200, kJson, models_json(options_.model_name, started_));
  } else {
    handle_completion(request, writer, path == "/v1/chat/completions");
  }
  metrics_.count_request(route ? path : "other", writer.status());  // bounded label values
}

// The chat prompt in the model's format. A control token the template needs and the vocabulary
// lacks (a format's tool tokens on a model without them) is the request's fault: 400 naming what
// asked for it.
std::vector<int32_t> HttpServer::chat_prompt(const CompletionRequest& request, const ChatTurn& turn) const {
  try {
    return generator_.chat_prompt(request.messages, turn.options());
  } catch (const Error& e) {  // a control token the vocabulary lacks, or a message the template refuses
    const bool token = std::string_view(e.what()).find("control token") != std::string_view::npos;
    throw ApiError(400, e.what(), token && request.tools ? "tools" : "messages");
  }
}

void HttpServer::handle_completion(const HttpRequest& http_request, ResponseWriter& writer, bool chat) {
  HeaderList extra;  // of an error answer
  try {
    const CompletionRequest request = chat ? parse_chat_request(http_request.body) : parse_completion_request(http_request.body);
    if (!request.model.empty() && request.model != options_.model_name)
      throw ApiError(404, fmt::format("the model '{}' does not exist (this server runs '{}')", request.model, options_.model_name),
                     "model");
    std::shared_ptr<Admission::Ticket> ticket = admission_.admit();
    if (!ticket) {
      if (shutting_down_) throw shutting_down_error();
      extra.emplace_back("Retry-After", "1");
      throw ApiError(503, fmt::format("the server is busy ({} requests are waiting); retry later", options_.max_waiting), "",
                     "server_error");
    }
    if (!ticket->wait()) throw shutting_down_error();

    // The engine is this request's from here until the ticket is dropped.
    std::optional<ChatTurn> turn;
    if (chat) turn.emplace(request, generator_.chat_style());
    GenerationInput input;
    input.chat = chat;
    input.prompt = chat ? chat_prompt(request, *turn) : generator_.text_prompt(request.prompt);
    input.sampler = request.sampler;
    input.stops = request.stops;
    if (turn) input.stops.insert(input.stops.end(), turn->stops().begin(), turn->stops().end());
    const std::unique_ptr<TokenConstraint> constraint =
        turn && turn->constrained() ? turn->constraint(generator_.tokenizer(), generator_.token_trie(), generator_.end_ids(true)) : nullptr;
    input.constraint = constraint.get();
    const int64_t prompt_tokens = static_cast<int64_t>(input.prompt.size());
    const int64_t room = std::max<int64_t>(options_.context - prompt_tokens, 0);  // new tokens the context has room for
    input.max_tokens = request.max_tokens.value_or(std::min(options_.default_max_tokens, room));
    // Compared with the room left, never summed: max_tokens may be any int64.
    if (prompt_tokens > options_.context || input.max_tokens > room)
      throw ApiError(400, fmt::format("the prompt ({} tokens) leaves room for {} new tokens in the context of {}; max_tokens is {}",
                                      prompt_tokens, room, options_.context, input.max_tokens),
                     request.max_tokens ? request.max_tokens_field : (chat ? "messages" : "prompt"));
    const ResponseHeader header{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++), unix_seconds(), options_.model_name, chat};
    auto stop_now = [&] { return shutting_down_.load() || writer.peer_has_closed(); };
    std::optional<ReplyParser> parser;
    if (turn) parser.emplace(turn->parser());
    auto finish = [&](GenerationResult& result) {
      if (parser) {
        parser->finish();
        result.finish_reason = ChatTurn::finish_reason(result.finish_reason, parser->reply());
      }
      metrics_.count_generation(result);
      metrics_.set_engine_snapshot(generator_.engine().stats(), generator_.session_stats());
    };

    if (!request.stream) {
      GenerationResult result = generator_.generate(input, [&](std::string_view text) {
        if (parser) parser->push(text);
        return true;
      }, stop_now);
      finish(result);
      if (result.finish_reason == "cancelled") throw shutting_down_error();  // (or nobody is listening)
      writer.send(200, kJson, completion_json(header, result, parser ? &parser->reply() : nullptr),
                  {{"X-Deltafin-Ids-Hash", ids_hash_text(result.ids)}});
      return;
    }
    writer.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    bool first = true;  // the first piece carries the role, so the first chunk marks the first token
    bool sent = true;
    auto send_deltas = [&](const std::vector<ReplyDelta>& deltas) {
      for (const ReplyDelta& d : deltas) {
        sent = sent && writer.write_chunk(delta_chunk_event(header, d, first));
        first = false;
      }
      return sent;
    };
    try {
      GenerationResult result = generator_.generate(
          input,
          [&](std::string_view text) {
            if (parser) return send_deltas(parser->push(text));
            sent = writer.write_chunk(text_chunk_event(header, std::string(text), first));
            first = false;
            return sent;
          },
          stop_now);
      if (parser && result.finish_reason != "cancelled") send_deltas(parser->finish());
      finish(result);
      if (first) writer.write_chunk(text_chunk_event(header, "", true));
      if (result.finish_reason == "cancelled") writer.write_chunk(error_event(shutting_down_error()));
      else writer.write_chunk(final_chunk_events(header, result, request.include_usage));
    } catch (const std::exception& e) {
      writer.write_chunk(error_event(ApiError(500, e.what(), "", "server_error")));
    }
    writer.write_chunk(kDoneEvent);
    writer.finish_stream();
  } catch (const ApiError& e) {
    answer_error(writer, e, extra);
  } catch (const std::exception& e) {  // the engine's errors (deltafin::Error: a failed drive, a bad token)
    answer_error(writer, ApiError(500, e.what(), "", "server_error"));
  }
}

}  // namespace deltafin::serve
