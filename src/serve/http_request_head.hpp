// The head of an HTTP/1.0 or 1.1 request (request line and header fields), parsed strictly: the
// request line "METHOD /target HTTP/1.x", "name: value" fields ended by CRLF, no folded lines.
// The body is framed by Content-Length only (a request with Transfer-Encoding is refused with
// 411); Content-Length past max_body_bytes is 413. Every refusal is an ApiError carrying the
// HTTP status, so the connection loop answers it and closes the connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin::serve {

struct RequestHead {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string path;    // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  uint64_t content_length = 0;
  bool keep_alive = true;        // HTTP/1.1 without "Connection: close"
  bool expect_continue = false;  // "Expect: 100-continue"

  // The value of the first field of that name (lower case), or "" when absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// head: the bytes up to and including the blank line ("\r\n\r\n").
RequestHead parse_request_head(std::string_view head, uint64_t max_body_bytes);

// Where the head ends in buffer (the index past "\r\n\r\n"), or npos while it is incomplete.
size_t find_head_end(std::string_view buffer);

}  // namespace deltafin::serve
