// Request heads (see http_request_head.hpp), after RFC 9112: tokens for the method and field
// names, visible characters in the target and field values, CRLF line ends.
#include "serve/http_request_head.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "serve/api_error.hpp"

namespace deltafin::serve {
namespace {

[[noreturn]] void refuse(int status, const std::string& message) { throw ApiError(status, message); }

bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char); }

// Field values: visible ASCII, spaces and tabs, and bytes >= 0x80 (obs-text); no control bytes.
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == '\t' || (u >= 0x20 && u != 0x7f);
  });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether a comma-separated list (Connection's) holds token, in any case.
bool list_has(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (lower(trim(list.substr(0, comma))) == token) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

uint64_t parse_content_length(std::string_view value, uint64_t max_body_bytes) {
  if (value.empty() || value.size() > 19 || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
    refuse(400, "Content-Length must be a decimal number of bytes");
  uint64_t n = 0;
  for (char c : value) n = n * 10 + static_cast<uint64_t>(c - '0');  // 19 digits fit in 64 bits
  if (n > max_body_bytes) refuse(413, "the request body is too large");
  return n;
}

}  // namespace

std::string RequestHead::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name) return value;
  return "";
}

bool RequestHead::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return h.first == name; });
}

size_t find_head_end(std::string_view buffer) {
  const size_t at = buffer.find("\r\n\r\n");
  return at == std::string_view::npos ? at : at + 4;
}

RequestHead parse_request_head(std::string_view head, uint64_t max_body_bytes) {
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") refuse(400, "the request head must end with an empty line");
  head.remove_suffix(2);  // every line, the last included, now ends with CRLF
  RequestHead r;

  size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  const size_t space1 = line.find(' '), space2 = line.rfind(' ');
  if (space1 == std::string_view::npos || space2 == space1) refuse(400, "the request line must be 'METHOD /path HTTP/1.1'");
  const std::string_view method = line.substr(0, space1), target = line.substr(space1 + 1, space2 - space1 - 1),
                         version = line.substr(space2 + 1);
  if (!is_token(method)) refuse(400, "the request method is not a token");
  if (target.empty() || target.front() != '/' ||
      !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; }))
    refuse(400, "the request target must be a path starting with '/'");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
  r.method = method;
  r.path = target.substr(0, target.find('?'));
  r.keep_alive = version == "HTTP/1.1";

  bool has_length = false;
  for (size_t start = line_end + 2; start < head.size(); start = line_end + 2) {
    line_end = head.find("\r\n", start);
    const std::string_view field = head.substr(start, line_end - start);
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || !is_token(field.substr(0, colon)))
      refuse(400, "a header line must be 'Name: value' (no space before the colon, no folded lines)");
    const std::string name = lower(field.substr(0, colon));
    const std::string_view value = trim(field.substr(colon + 1));
    if (!is_field_value(value)) refuse(400, fmt::format("the header {} has a control character", name));
    if (name == "content-length") {
      const uint64_t n = parse_content_length(value, max_body_bytes);
      if (has_length && n != r.content_length) refuse(400, "two different Content-Length headers");
      r.content_length = n;
      has_length = true;
    } else if (name == "transfer-encoding") {
      refuse(411, "send the body with Content-Length (Transfer-Encoding bodies are not read)");
    } else if (name == "connection") {
      if (list_has(value, "close")) r.keep_alive = false;
    } else if (name == "expect") {
      if (lower(value) != "100-continue") refuse(417, "the only expectation served is 100-continue");
      r.expect_continue = true;
    }
    r.headers.emplace_back(name, std::string(value));
  }
  return r;
}

}  // namespace deltafin::serve
