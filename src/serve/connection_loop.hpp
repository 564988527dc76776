// The connections of `deltafin serve`, watched by one thread (poll): it accepts them, reads each
// request's head and body into memory within a deadline, caps the connections open in all and
// per client address, and hands each complete request to a handler thread; the connection comes
// back for its next request (keep-alive) once the response is written. No thread waits on a
// client that has not sent a whole request, so slow clients hold a buffer and a socket each, not
// a worker and never a generation; a client too slow for its deadline gets 408 and is closed,
// and the buffers of requests being read are capped together.
// stop() closes the listener and every idle or half-read connection at once, and cuts those
// still being answered after a grace period, so the loop ends within a bounded time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/http_request_head.hpp"
#include "serve/http_response.hpp"

namespace deltafin::serve {

struct HttpRequest {
  RequestHead head;
  std::string body;
};

struct ConnectionLimits {
  int max_connections = 512;        // open at once (more: 503 and closed)
  int max_per_address = 64;         // open at once from one client address (more: 429 and closed)
  double head_seconds = 10;         // a request's head must arrive within this (from the connection's start or its last response)
  double body_bytes_per_second = 65536;  // and its body within head_seconds more, plus its length at this rate
  size_t max_head_bytes = 16384;    // larger: 431
  uint64_t max_body_bytes = 4 << 20;  // larger: 413
  uint64_t max_buffered_bytes = 64 << 20;  // of requests being read, all connections together (more: 503)
  int max_handlers = 256;           // requests being answered at once (more: 503)
  double stop_grace_seconds = 3;    // stop(): responses still being written after this are cut off
};

class ConnectionLoop {
 public:
  // handler answers a request on its own thread, through the writer (it must send a response).
  using Handler = std::function<void(const HttpRequest& request, ResponseWriter& writer)>;
  // Told of each request the loop answers itself (a refusal): its path ("" when unknown) and status.
  using RefusalCounter = std::function<void(const std::string& path, int status)>;

  explicit ConnectionLoop(const ConnectionLimits& limits);
  ~ConnectionLoop();
  ConnectionLoop(const ConnectionLoop&) = delete;
  ConnectionLoop& operator=(const ConnectionLoop&) = delete;

  // Listens on host:port (SO_REUSEADDR only: a port another server listens on fails); port 0 picks
  // a free one. Returns the port; throws deltafin::Error naming the port when it cannot. Clients
  // that connect before run() wait in the listen backlog.
  int bind(const std::string& host, int port);
  // Serves until stop(); returns once every handler thread has finished. count_refusal may be empty.
  void run(Handler handler, RefusalCounter count_refusal);
  // From any thread (a signal watcher): begins the bounded shutdown.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection;

  void accept_connections(Clock::time_point now);
  void read_from(Connection& c, Clock::time_point now);
  void advance(Connection& c, Clock::time_point now);  // parse what is buffered; dispatch a complete request
  void dispatch(Connection& c, HttpRequest request);
  void take_back_finished(Clock::time_point now);
  // Answers status and half-closes; the connection is drained until the client closes (or a
  // short deadline), so that its unsent bytes do not reset the connection before it reads this.
  void refuse(Connection& c, int status, const std::string& message, const std::string& path, Clock::time_point now);
  void refuse_at_once(int fd, int status, const std::string& message, const std::string& path);  // at accept
  void close_connection(int fd);
  void begin_stopping(Clock::time_point now);

  ConnectionLimits limits_;
  Handler handler_;
  RefusalCounter count_refusal_;
  int listener_ = -1;
  int wake_read_ = -1, wake_write_ = -1;  // a pipe: stop() and finished handlers wake poll()
  std::map<int, std::unique_ptr<Connection>> connections_;  // by socket; only the loop's thread touches it
  std::map<std::string, int> per_address_;
  int handlers_running_ = 0;
  uint64_t buffered_bytes_ = 0;  // in the buffers of connections being read
  Clock::time_point accept_paused_until_{};  // out of descriptors: accept again after a pause
  bool stopping_ = false;                    // the loop's view of stop_requested_
  Clock::time_point stop_deadline_{};
  bool cut_off_ = false;                     // stop's grace period ended: sockets shut down

  std::mutex mutex_;  // guards what handlers and stop() hand to the loop
  std::vector<std::pair<int, bool>> finished_;  // (socket, reusable) of handlers that are done
  bool stop_requested_ = false;
};

}  // namespace deltafin::serve
