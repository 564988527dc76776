// libFuzzer target: the JSON bodies of `deltafin serve`'s completion endpoints. Any bytes must
// either parse into a request within the documented ranges (max_tokens >= 0, n = 1, at most 4
// non-empty stops, top_p in (0, 1]) or be refused with an ApiError 400; anything else (a crash,
// a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/api_error.hpp"
#include "serve/request.hpp"

namespace {

void check(const deltafin::serve::CompletionRequest& r) {
  if (r.max_tokens && *r.max_tokens < 0) __builtin_trap();
  if (r.stops.size() > 4 || r.sampler.top_k < 0 || !(r.sampler.top_p > 0 && r.sampler.top_p <= 1)) __builtin_trap();
  for (const auto& s : r.stops)
    if (s.empty()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {true, false}) {
    try {
      check(chat ? deltafin::serve::parse_chat_request(body) : deltafin::serve::parse_completion_request(body));
    } catch (const deltafin::serve::ApiError& e) {
      if (e.status != 400) __builtin_trap();
    }
  }
  return 0;
}
