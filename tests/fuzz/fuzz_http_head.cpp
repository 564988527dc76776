// libFuzzer target: `deltafin serve`'s HTTP request heads. Any bytes must either parse into a
// head whose path starts with '/' and whose Content-Length is within the limit, or be refused
// with an ApiError carrying a 4xx/5xx status; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/api_error.hpp"
#include "serve/http_request_head.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t end = deltafin::serve::find_head_end(bytes);
  constexpr uint64_t kMaxBody = 1 << 20;
  try {
    const deltafin::serve::RequestHead head = deltafin::serve::parse_request_head(bytes.substr(0, end), kMaxBody);
    if (head.path.empty() || head.path.front() != '/' || head.content_length > kMaxBody || head.method.empty()) __builtin_trap();
  } catch (const deltafin::serve::ApiError& e) {
    if (e.status < 400 || e.status > 599) __builtin_trap();
  }
  return 0;
}
