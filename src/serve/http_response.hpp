// Writing one HTTP/1.1 response on a connection's socket: a whole one (Content-Length), or a
// streamed one (chunked transfer coding, for server-sent events). Each write has a deadline, so
// a client that stops reading fails the write instead of holding the thread; after a failed
// write the connection is not reused.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin::serve {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// The status line and fields of a response ("HTTP/1.1 200 OK\r\n...\r\n\r\n"). content_length < 0:
// chunked.
std::string response_head(int status, std::string_view content_type, long long content_length, const HeaderList& extra,
                          bool keep_alive);

class ResponseWriter {
 public:
  // fd: a connected socket (non-blocking); keep_alive: the request allows another after this one.
  ResponseWriter(int fd, bool keep_alive, double write_seconds = 10);

  void send(int status, std::string_view content_type, std::string_view body, const HeaderList& extra = {});
  // A streamed response: start_stream, then write_chunk for each piece, then finish_stream. Each
  // returns false once the client can no longer be written to.
  bool start_stream(int status, std::string_view content_type, const HeaderList& extra = {});
  bool write_chunk(std::string_view data);
  bool finish_stream();

  bool peer_has_closed() const;
  int status() const { return status_; }  // 0 while nothing is sent
  // The connection may serve another request: keep-alive allowed, the response complete and every
  // write done.
  bool reusable() const { return keep_alive_ && !failed_ && !streaming_ && status_ != 0; }

 private:
  bool write_all(std::string_view data);

  int fd_;
  bool keep_alive_;
  double write_seconds_;
  int status_ = 0;
  bool streaming_ = false;  // a chunked body is open
  bool failed_ = false;
};

}  // namespace deltafin::serve
