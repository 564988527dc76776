// Routes and request handling of `deltafin serve` (see http_server.hpp).
#include "serve/http_server.hpp"

#include <httplib.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "serve/openai_format.hpp"
#include "serve/peer_socket.hpp"
#include "serve/request.hpp"
#include "util/error.hpp"
#include "util/ids_hash.hpp"

namespace deltafin::serve {
namespace {

constexpr const char* kJson = "application/json";
constexpr int kWorkersBesideTheLine = 4;  // threads for /health, /metrics and refusals while the line is full

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool is_endpoint(const std::string& path) {
  return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/models" || path == "/health" ||
         path == "/metrics";
}

ApiError shutting_down_error() { return ApiError(503, "the server is shutting down", "", "server_error"); }

// The text of an error the HTTP library answered by itself.
ApiError library_error(int status) {
  switch (status) {
    case 404: return ApiError(404, "no such endpoint", "", "invalid_request_error");
    case 413: return ApiError(413, "the request body is too large", "", "invalid_request_error");
    default: return ApiError(status, fmt::format("HTTP error {}", status), "", "invalid_request_error");
  }
}

}  // namespace

HttpServer::HttpServer(Generator& generator, const ServerOptions& options)
    : generator_(generator),
      options_(options),
      http_(std::make_unique<httplib::Server>()),
      admission_(options.max_waiting),
      started_(unix_seconds()) {
  const size_t workers = static_cast<size_t>(options.max_waiting) + 1 + kWorkersBesideTheLine;
  http_->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  http_->set_payload_max_length(options.max_body_bytes);
  http_->set_keep_alive_timeout(2);  // a shutdown waits for idle kept-alive connections this long at most
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + options_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    answer_error(res, ApiError(401, req.has_header("Authorization") ? "wrong API key" : "an API key is required (Authorization: Bearer KEY)",
                               "", "authentication_error"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) answer_error(res, library_error(res.status));
  });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_request(is_endpoint(req.path) ? req.path : "other", res.status);  // bounded label values
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (shutting_down_) return answer_error(res, shutting_down_error());
    res.set_content("{\"status\": \"ok\"}", kJson);
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(admission_.running(), admission_.waiting(), options_.memory_budget), "text/plain; version=0.0.4");
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_json(options_.model_name, started_), kJson);
  });
  http_->Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, true); });
  http_->Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, false); });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host) : options_.port;
  if (port <= 0 || (options_.port != 0 && !http_->bind_to_port(options_.host, options_.port)))
    fail("--host {} --port {}: cannot listen there (in use, or not an address of this machine)", options_.host,
         options_.port);
  return port;
}

void HttpServer::serve() {
  http_->listen_after_bind();
  served_ = true;
}

void HttpServer::shut_down() {
  shutting_down_ = true;
  admission_.shut_down();
  // stop() acts only on a server that listens: a signal right after bind() waits for listening
  // to begin. The workers finish their responses before listen_after_bind() returns.
  while (!http_->is_running() && !served_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
}

void HttpServer::answer_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error_json(error), kJson);
}

void HttpServer::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  try {
    const CompletionRequest request = chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
    if (!request.model.empty() && request.model != options_.model_name)
      throw ApiError(404, fmt::format("the model '{}' does not exist (this server runs '{}')", request.model, options_.model_name),
                     "model");
    std::shared_ptr<Admission::Ticket> ticket = admission_.admit();
    if (!ticket) {
      if (shutting_down_) throw shutting_down_error();
      res.set_header("Retry-After", "1");
      throw ApiError(503, fmt::format("the server is busy ({} requests are waiting); retry later", options_.max_waiting), "",
                     "server_error");
    }
    const int socket_fd = find_connection_socket(req.local_port, req.remote_addr, req.remote_port);
    if (!ticket->wait()) throw shutting_down_error();

    // The engine is this request's from here until the ticket is dropped.
    GenerationInput input;
    input.chat = chat;
    input.prompt = chat ? generator_.chat_prompt(request.messages) : generator_.text_prompt(request.prompt);
    input.sampler = request.sampler;
    input.stops = request.stops;
    input.max_tokens = request.max_tokens.value_or(std::min<int64_t>(
        options_.default_max_tokens, std::max<int64_t>(options_.context - static_cast<int64_t>(input.prompt.size()), 0)));
    const int64_t needed = static_cast<int64_t>(input.prompt.size()) + input.max_tokens;
    if (needed > options_.context)
      throw ApiError(400, fmt::format("the prompt ({} tokens) and max_tokens {} need {} positions, past the context of {}",
                                      input.prompt.size(), input.max_tokens, needed, options_.context),
                     request.max_tokens ? (chat ? "max_completion_tokens" : "max_tokens") : (chat ? "messages" : "prompt"));
    ResponseHeader header{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++), unix_seconds(), options_.model_name, chat};
    auto finish = [this](const GenerationResult& result) {
      metrics_.count_generation(result);
      metrics_.set_engine_snapshot(generator_.engine().stats(), generator_.state_bytes());
    };

    if (!request.stream) {
      const GenerationResult result = generator_.generate(
          input, [](std::string_view) { return true; },
          [&] { return shutting_down_.load() || peer_has_closed(socket_fd); });
      finish(result);
      if (result.finish_reason == "cancelled") throw shutting_down_error();  // (or nobody is listening)
      res.set_header("X-Deltafin-Ids-Hash", ids_hash_text(result.ids));
      res.set_content(completion_json(header, result), kJson);
      return;
    }
    const bool include_usage = request.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, ticket, input = std::move(input), header, include_usage, socket_fd, finish](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& event) { return sink.write(event.data(), event.size()); };
          bool first = true;  // the first piece carries the role, so the first chunk marks the first token
          try {
            const GenerationResult result = generator_.generate(
                input,
                [&](std::string_view text) {
                  const bool sent = send(text_chunk_event(header, std::string(text), first));
                  first = false;
                  return sent;
                },
                [&] { return shutting_down_.load() || peer_has_closed(socket_fd); });
            finish(result);
            if (first) send(text_chunk_event(header, "", true));
            if (result.finish_reason == "cancelled") send(error_event(shutting_down_error()));
            else send(final_chunk_events(header, result, include_usage));
          } catch (const std::exception& e) {
            send(error_event(ApiError(500, e.what(), "", "server_error")));
          }
          send(kDoneEvent);
          sink.done();
          return true;
        });
  } catch (const ApiError& e) {
    answer_error(res, e);
  } catch (const std::exception& e) {  // the engine's errors (deltafin::Error: a failed drive, a bad token)
    answer_error(res, ApiError(500, e.what(), "", "server_error"));
  }
}

}  // namespace deltafin::serve
