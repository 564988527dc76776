// Responses on a socket (see http_response.hpp).
#include "serve/http_response.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>

#include "serve/peer_socket.hpp"

namespace deltafin::serve {
namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;  // a closed peer fails the write (macOS: SIGPIPE is ignored by serve)
#else
constexpr int kSendFlags = 0;
#endif

}  // namespace

std::string response_head(int status, std::string_view content_type, long long content_length, const HeaderList& extra,
                          bool keep_alive) {
  std::string head = fmt::format("HTTP/1.1 {} {}\r\n", status, reason_phrase(status));
  if (!content_type.empty()) head += fmt::format("Content-Type: {}\r\n", content_type);
  head += content_length < 0 ? std::string("Transfer-Encoding: chunked\r\n") : fmt::format("Content-Length: {}\r\n", content_length);
  for (const auto& [name, value] : extra) head += fmt::format("{}: {}\r\n", name, value);
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

ResponseWriter::ResponseWriter(int fd, bool keep_alive, double write_seconds)
    : fd_(fd), keep_alive_(keep_alive), write_seconds_(write_seconds) {}

bool ResponseWriter::write_all(std::string_view data) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(write_seconds_);
  while (!failed_ && !data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), kSendFlags);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd_, POLLOUT, 0};
      if (left > 0 && ::poll(&p, 1, static_cast<int>(left)) >= 0) continue;
    }
    failed_ = true;  // an error, or the client stopped reading for write_seconds
  }
  return !failed_;
}

void ResponseWriter::send(int status, std::string_view content_type, std::string_view body, const HeaderList& extra) {
  status_ = status;
  std::string message = response_head(status, content_type, static_cast<long long>(body.size()), extra, keep_alive_);
  message += body;
  write_all(message);
}

bool ResponseWriter::start_stream(int status, std::string_view content_type, const HeaderList& extra) {
  status_ = status;
  streaming_ = true;
  return write_all(response_head(status, content_type, -1, extra, keep_alive_));
}

bool ResponseWriter::write_chunk(std::string_view data) {
  if (data.empty()) return !failed_;  // an empty chunk would end the body
  return write_all(fmt::format("{:x}\r\n{}\r\n", data.size(), data));
}

bool ResponseWriter::finish_stream() {
  const bool ok = write_all("0\r\n\r\n");
  streaming_ = false;
  return ok;
}

bool ResponseWriter::peer_has_closed() const { return failed_ || serve::peer_has_closed(fd_); }

}  // namespace deltafin::serve
