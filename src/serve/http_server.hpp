// The HTTP side of `deltafin serve`: routes (404 for an unknown path, 405 with Allow for a known
// one asked with another method), the API key (on /v1/ and /metrics; /health stays open for
// liveness probes and tells nothing), context limits, the generation line (503 with Retry-After
// when full), server-sent events for streamed responses, cancellation when a client disconnects,
// and a shutdown that answers what is in flight with an error. The connections themselves, with
// their deadlines and caps, are the connection loop's (connection_loop.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "serve/admission.hpp"
#include "serve/api_error.hpp"
#include "serve/chat_turn.hpp"
#include "serve/connection_loop.hpp"
#include "serve/generator.hpp"
#include "serve/metrics.hpp"

namespace deltafin::serve {

struct ServerOptions {
  std::string api_key;             // "": no key asked
  std::string model_name;          // the id clients name in "model"
  int max_waiting = 8;             // requests waiting behind the running one
  int64_t context = 0;             // positions a request may reach (prompt + max_tokens)
  int64_t default_max_tokens = 256;
  uint64_t memory_budget = 0;      // reported by /metrics beside the peak RSS
};

class HttpServer {
 public:
  // loop: bound already (ConnectionLoop::bind), so that a used port fails before the model loads.
  HttpServer(Generator& generator, const ServerOptions& options, ConnectionLoop& loop);

  // Serves until shut_down(); returns once every request's handler is done.
  void serve();
  // From another thread: the running generation stops after its current token and is answered
  // with an error, waiting requests too; idle and half-read connections close at once.
  void shut_down();

 private:
  void handle(const HttpRequest& request, ResponseWriter& writer);
  void handle_completion(const HttpRequest& request, ResponseWriter& writer, bool chat);
  std::vector<int32_t> chat_prompt(const CompletionRequest& request, const ChatTurn& turn) const;
  bool authorized(const HttpRequest& request) const;

  Generator& generator_;
  ServerOptions options_;
  Admission admission_;
  Metrics metrics_;
  ConnectionLoop& loop_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> next_id_{1};
  int64_t started_ = 0;  // Unix seconds
};

}  // namespace deltafin::serve
