// The connection loop (see connection_loop.hpp).
#include "serve/connection_loop.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

#include "serve/api_error.hpp"
#include "serve/listen_socket.hpp"
#include "serve/openai_format.hpp"
#include "util/error.hpp"

namespace deltafin::serve {

struct ConnectionLoop::Connection {
  // Draining: refused and half-closed; what the client still sends is read and dropped until it
  // closes, so that its unread bytes do not reset the connection before it reads the refusal.
  enum class State { Reading, Answering, Draining };
  int fd = -1;
  std::string address;
  State state = State::Reading;
  std::string buffer;    // bytes read and not yet consumed
  std::unique_ptr<RequestHead> head;  // once the head is in
  size_t head_bytes = 0;
  bool continue_sent = false;
  Clock::time_point deadline;
  std::thread handler;
};

namespace {

constexpr double kDrainSeconds = 2;
constexpr size_t kReadSlice = 256 << 10;  // bytes read from one connection per wake-up, so that none starves the rest
constexpr int kAcceptsPerWake = 64;

template <class Clock>
typename Clock::duration seconds(double s) {
  return std::chrono::duration_cast<typename Clock::duration>(std::chrono::duration<double>(s));
}

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

std::string numeric_host(const sockaddr_storage& address, socklen_t length) {
  char name[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, name, sizeof(name), nullptr, 0, NI_NUMERICHOST) != 0)
    return "?";
  return name;
}

// One best-effort write of a short response on a non-blocking socket (it fits the send buffer).
void send_now(int fd, const std::string& message) {
#ifdef MSG_NOSIGNAL
  [[maybe_unused]] const ssize_t n = ::send(fd, message.data(), message.size(), MSG_NOSIGNAL);
#else
  [[maybe_unused]] const ssize_t n = ::send(fd, message.data(), message.size(), 0);
#endif
}

// An error answer of the loop's own; the connection closes after it. Busy answers (503, 429) ask
// the client to retry in a second.
std::string refusal_response(int status, const std::string& message) {
  const std::string body = error_json(ApiError(status, message, "", status >= 500 ? "server_error" : "invalid_request_error"));
  HeaderList extra;
  if (status == 503 || status == 429) extra.emplace_back("Retry-After", "1");
  return response_head(status, "application/json", static_cast<long long>(body.size()), extra, false) + body;
}

}  // namespace

ConnectionLoop::ConnectionLoop(const ConnectionLimits& limits) : limits_(limits) {
  int fds[2];
  if (::pipe(fds) != 0) fail("serve: cannot create a pipe ({})", std::strerror(errno));
  wake_read_ = fds[0];
  wake_write_ = fds[1];
  set_nonblocking(wake_read_);
  set_nonblocking(wake_write_);
}

ConnectionLoop::~ConnectionLoop() {
  for (auto& [fd, c] : connections_) {
    if (c->handler.joinable()) c->handler.join();  // (run() returns only once they are done)
    ::close(fd);
  }
  if (listener_ >= 0) ::close(listener_);
  ::close(wake_read_);
  ::close(wake_write_);
}

int ConnectionLoop::bind(const std::string& host, int port) {
  int bound_port = 0;
  listener_ = listen_on(host, port, bound_port);
  set_nonblocking(listener_);
  return bound_port;
}

void ConnectionLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
  }
  const char byte = 's';
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &byte, 1);
}

void ConnectionLoop::run(Handler handler, RefusalCounter count_refusal) {
  handler_ = std::move(handler);
  count_refusal_ = std::move(count_refusal);
  std::vector<pollfd> polled;
  std::vector<int> polled_fds;  // the connection of each entry of polled past the first two
  for (;;) {
    auto now = Clock::now();
    take_back_finished(now);
    {
      std::lock_guard lock(mutex_);
      if (stop_requested_ && !stopping_) begin_stopping(now);
    }
    if (stopping_) {
      if (handlers_running_ == 0) break;
      if (!cut_off_ && now >= stop_deadline_) {  // the grace period is over: writes fail, handlers finish
        for (auto& [fd, c] : connections_)
          if (c->state == Connection::State::Answering) ::shutdown(fd, SHUT_RDWR);
        cut_off_ = true;
      }
    }

    // Deadlines: a request that did not arrive in time is refused; an idle connection, or a
    // refused one that is drained, is closed.
    auto next = now + std::chrono::seconds(1);
    std::vector<int> expired;
    for (auto& [fd, c] : connections_) {
      if (c->state == Connection::State::Answering) continue;
      if (now >= c->deadline) expired.push_back(fd);
      else next = std::min(next, c->deadline);
    }
    for (int fd : expired) {
      Connection& c = *connections_.at(fd);
      if (c.state == Connection::State::Reading && (!c.buffer.empty() || c.head))
        refuse(c, 408, fmt::format("the request did not arrive within its deadline ({} s for the head)", limits_.head_seconds),
               c.head ? c.head->path : "", now);
      else
        close_connection(fd);
    }
    if (stopping_ && !cut_off_) next = std::min(next, stop_deadline_);

    polled.assign({pollfd{wake_read_, POLLIN, 0}, pollfd{-1, POLLIN, 0}});
    if (listener_ >= 0 && now >= accept_paused_until_) polled[1].fd = listener_;
    polled_fds.clear();
    for (auto& [fd, c] : connections_) {
      if (c->state == Connection::State::Answering) continue;
      polled.push_back(pollfd{fd, POLLIN, 0});
      polled_fds.push_back(fd);
    }
    if (listener_ >= 0 && now < accept_paused_until_) next = std::min(next, accept_paused_until_);
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    if (::poll(polled.data(), polled.size(), static_cast<int>(std::max<long long>(wait_ms, 0))) < 0) {
      for (pollfd& p : polled) p.revents = 0;  // EINTR, or out of memory: nothing is ready; try again shortly
      if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    now = Clock::now();

    if (polled[0].revents) {
      char drain[64];
      while (::read(wake_read_, drain, sizeof(drain)) > 0) {
      }
    }
    if (polled[1].fd >= 0 && polled[1].revents) accept_connections(now);
    for (size_t i = 0; i < polled_fds.size(); ++i) {
      if (!polled[i + 2].revents) continue;
      auto it = connections_.find(polled_fds[i]);
      if (it != connections_.end()) read_from(*it->second, now);
    }
  }
  for (auto it = connections_.begin(); it != connections_.end();) {  // (every one is idle now)
    ::close(it->first);
    it = connections_.erase(it);
  }
  per_address_.clear();
}

void ConnectionLoop::begin_stopping(Clock::time_point now) {
  stopping_ = true;
  stop_deadline_ = now + seconds<Clock>(limits_.stop_grace_seconds);
  if (listener_ >= 0) {
    ::close(listener_);
    listener_ = -1;
  }
  std::vector<int> idle;
  for (auto& [fd, c] : connections_)
    if (c->state != Connection::State::Answering) idle.push_back(fd);
  for (int fd : idle) close_connection(fd);
}

void ConnectionLoop::accept_connections(Clock::time_point now) {
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const int fd = ::accept(listener_, reinterpret_cast<sockaddr*>(&peer), &length);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)  // out of descriptors or memory: open connections must close first
        accept_paused_until_ = now + std::chrono::milliseconds(100);
      return;
    }
    set_nonblocking(fd);
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));  // streamed events go out at once
#ifdef SO_NOSIGPIPE
    setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &yes, sizeof(yes));
#endif
    const std::string address = numeric_host(peer, length);
    // Past a cap the refusal is sent and the socket closed at once (not drained): refused
    // connections must not pile up open themselves.
    if (static_cast<int>(connections_.size()) >= limits_.max_connections) {
      refuse_at_once(fd, 503, "the server has too many connections open; retry later", "");
      continue;
    }
    if (per_address_[address] >= limits_.max_per_address) {
      refuse_at_once(fd, 429, fmt::format("too many connections from {} (at most {} at once)", address, limits_.max_per_address), "");
      continue;
    }
    ++per_address_[address];
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->address = address;
    c->deadline = now + seconds<Clock>(limits_.head_seconds);
    connections_[fd] = std::move(c);
  }
}

void ConnectionLoop::read_from(Connection& c, Clock::time_point now) {
  char chunk[16384];
  size_t taken = 0;
  while (taken < kReadSlice) {
    const ssize_t n = ::recv(c.fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      taken += static_cast<size_t>(n);
      if (c.state == Connection::State::Reading) {
        c.buffer.append(chunk, static_cast<size_t>(n));
        buffered_bytes_ += static_cast<uint64_t>(n);
        if (buffered_bytes_ > limits_.max_buffered_bytes)
          return refuse(c, 503, "the server is reading too many requests at once; retry later", c.head ? c.head->path : "", now);
      }
      if (c.state == Connection::State::Reading && !c.head && c.buffer.size() > limits_.max_head_bytes) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close_connection(c.fd);  // end of file or an error: the client is gone (a half-read request with it)
    return;
  }
  if (c.state == Connection::State::Reading) advance(c, now);
}

void ConnectionLoop::advance(Connection& c, Clock::time_point now) {
  if (!c.head) {
    const size_t end = find_head_end(std::string_view(c.buffer).substr(0, limits_.max_head_bytes));
    if (end == std::string_view::npos) {
      if (c.buffer.size() > limits_.max_head_bytes)
        refuse(c, 431, fmt::format("the request head is larger than {} bytes", limits_.max_head_bytes), "", now);
      return;
    }
    try {
      c.head = std::make_unique<RequestHead>(parse_request_head(std::string_view(c.buffer).substr(0, end), limits_.max_body_bytes));
    } catch (const ApiError& e) {
      return refuse(c, e.status, e.what(), "", now);
    }
    c.head_bytes = end;
    c.deadline = now + seconds<Clock>(limits_.head_seconds + static_cast<double>(c.head->content_length) / limits_.body_bytes_per_second);
  }
  if (c.buffer.size() - c.head_bytes < c.head->content_length) {
    if (c.head->expect_continue && !c.continue_sent) send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
    c.continue_sent = true;
    return;
  }
  if (handlers_running_ >= limits_.max_handlers)
    return refuse(c, 503, "the server is busy; retry later", c.head->path, now);
  const size_t length = c.head->content_length;
  HttpRequest request{std::move(*c.head), c.buffer.substr(c.head_bytes, length)};
  c.buffer.erase(0, c.head_bytes + length);
  buffered_bytes_ -= c.head_bytes + length;
  if (c.buffer.capacity() > (64 << 10)) c.buffer.shrink_to_fit();  // an idle connection keeps no large body's room
  c.head.reset();
  c.continue_sent = false;
  dispatch(c, std::move(request));
}

void ConnectionLoop::dispatch(Connection& c, HttpRequest request) {
  const std::string path = request.head.path;
  c.state = Connection::State::Answering;
  ++handlers_running_;
  try {
    const bool keep_alive = request.head.keep_alive;
    c.handler = std::thread([this, fd = c.fd, keep_alive, request = std::move(request)] {
      ResponseWriter writer(fd, keep_alive);
      try {
        handler_(request, writer);
      } catch (const std::exception& e) {
        if (writer.status() == 0) writer.send(500, "application/json", error_json(ApiError(500, e.what(), "", "server_error")));
      }
      {
        std::lock_guard lock(mutex_);
        finished_.emplace_back(fd, writer.reusable());
      }
      const char byte = 'f';
      [[maybe_unused]] const ssize_t n = ::write(wake_write_, &byte, 1);
    });
  } catch (const std::system_error&) {  // no thread to be had
    --handlers_running_;
    c.state = Connection::State::Reading;
    refuse(c, 503, "the server is busy; retry later", path, Clock::now());
  }
}

void ConnectionLoop::take_back_finished(Clock::time_point now) {
  std::vector<std::pair<int, bool>> finished;
  {
    std::lock_guard lock(mutex_);
    finished.swap(finished_);
  }
  for (const auto& [fd, reusable] : finished) {
    Connection& c = *connections_.at(fd);
    c.handler.join();
    --handlers_running_;
    if (!reusable || stopping_) {
      close_connection(fd);
      continue;
    }
    c.state = Connection::State::Reading;
    c.deadline = now + seconds<Clock>(limits_.head_seconds);
    advance(c, now);  // a request sent behind the last one may be in already
  }
}

void ConnectionLoop::refuse_at_once(int fd, int status, const std::string& message, const std::string& path) {
  if (count_refusal_) count_refusal_(path, status);
  send_now(fd, refusal_response(status, message));
  ::close(fd);
}

void ConnectionLoop::refuse(Connection& c, int status, const std::string& message, const std::string& path, Clock::time_point now) {
  if (count_refusal_) count_refusal_(path, status);
  send_now(c.fd, refusal_response(status, message));
  ::shutdown(c.fd, SHUT_WR);
  c.state = Connection::State::Draining;
  buffered_bytes_ -= c.buffer.size();
  c.buffer = std::string();
  c.head.reset();
  c.deadline = now + seconds<Clock>(kDrainSeconds);
}

void ConnectionLoop::close_connection(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (--per_address_[it->second->address] == 0) per_address_.erase(it->second->address);
  buffered_bytes_ -= it->second->buffer.size();
  ::close(fd);
  connections_.erase(it);
}

}  // namespace deltafin::serve
