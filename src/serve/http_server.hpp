// The HTTP side of `deltafin serve`, on cpp-httplib: routes, the API key, body and context
// limits, the generation line (503 with Retry-After when full), server-sent events for streamed
// responses, cancellation when a client disconnects, and a shutdown that answers what is in
// flight with an error.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "serve/admission.hpp"
#include "serve/api_error.hpp"
#include "serve/generator.hpp"
#include "serve/metrics.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace deltafin::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (printed)
  std::string api_key;             // "": no key asked
  std::string model_name;          // the id clients name in "model"
  size_t max_body_bytes = 4 << 20;
  int max_waiting = 8;             // requests waiting behind the running one
  int64_t context = 0;             // positions a request may reach (prompt + max_tokens)
  int64_t default_max_tokens = 256;
  uint64_t memory_budget = 0;      // reported by /metrics beside the peak RSS
};

class HttpServer {
 public:
  HttpServer(Generator& generator, const ServerOptions& options);
  ~HttpServer();

  // Binds the address; returns the port (throws deltafin::Error when it cannot).
  int bind();
  // Serves until shut_down(); returns once every connection's worker is done.
  void serve();
  // From another thread: the running generation stops after its current token and is answered
  // with an error, waiting requests too; then the listener closes.
  void shut_down();

 private:
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void answer_error(httplib::Response& res, const ApiError& error);

  Generator& generator_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  Admission admission_;
  Metrics metrics_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> served_{false};  // serve() has returned
  std::atomic<uint64_t> next_id_{1};
  int64_t started_ = 0;  // Unix seconds
};

}  // namespace deltafin::serve
