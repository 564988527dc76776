// The one session the server keeps between requests, and the tokens it holds. A request's prompt
// that extends what the session holds (the previous turn's prompt and reply) keeps that state:
// the session is rewound to the common prefix and only the rest is prefilled (by the generation
// loop, decode/generation.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <deltafin/engine.hpp>

namespace deltafin::serve {

class SessionCache {
 public:
  // reuse false: every prompt is prefilled from position 0 (for measuring what reuse saves).
  SessionCache(Engine& engine, bool reuse);

  // Rewinds the session to the longest prefix of `prompt` it holds, short of the prompt's last
  // token (whose logits the generation needs), and returns that prefix's length.
  int64_t reuse(std::span<const int32_t> prompt);

  // The tokens the session holds after decoding: `committed` (prompt and generated tokens) cut
  // to the session's position.
  void record(std::span<const int32_t> committed);

  Session& session() { return *session_; }
  const Session& session() const { return *session_; }

 private:
  bool reuse_;
  std::unique_ptr<Session> session_;
  std::vector<int32_t> held_;  // the tokens at positions 0 .. position()-1
};

}  // namespace deltafin::serve
