// The one session the server keeps between requests, and the tokens it holds. A request's prompt
// that extends what the session holds (the previous turn's prompt and reply) keeps that state:
// the session is rewound to the common prefix and only the rest is prefilled.
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
  SessionCache(Engine& engine, int64_t chunk, bool reuse);

  // Brings the session to hold prompt[0 .. n-1] and returns the logits after its last token
  // (empty when stop() said to stop between prefill passes). `reused`: positions kept.
  template <class StopNow>
  std::vector<float> prefill(std::span<const int32_t> prompt, int64_t& reused, StopNow&& stop_now);

  // The tokens the session holds after decoding: `committed` (prompt and generated tokens) cut
  // to the session's position.
  void record(std::span<const int32_t> committed);

  Session& session() { return *session_; }
  const Session& session() const { return *session_; }

 private:
  int64_t chunk_;
  bool reuse_;
  std::unique_ptr<Session> session_;
  std::vector<int32_t> held_;  // the tokens at positions 0 .. position()-1
};

template <class StopNow>
std::vector<float> SessionCache::prefill(std::span<const int32_t> prompt, int64_t& reused, StopNow&& stop_now) {
  size_t common = 0;
  if (reuse_)
    while (common < held_.size() && common + 1 < prompt.size() && held_[common] == prompt[common]) ++common;
  session_->rewind(static_cast<int64_t>(common));  // the last prompt token is always fed: its logits are needed
  held_.resize(common);
  reused = static_cast<int64_t>(common);
  std::vector<float> logits;
  for (size_t done = common; done < prompt.size();) {
    if (stop_now()) return {};
    const size_t n = std::min<size_t>(static_cast<size_t>(chunk_), prompt.size() - done);
    logits = session_->append(prompt.subspan(done, n), false);
    held_.insert(held_.end(), prompt.begin() + done, prompt.begin() + done + n);
    done += n;
  }
  return logits;
}

}  // namespace deltafin::serve
