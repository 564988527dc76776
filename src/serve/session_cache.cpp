// The server's session cache (see session_cache.hpp).
#include "serve/session_cache.hpp"

#include <algorithm>

namespace deltafin::serve {

SessionCache::SessionCache(Engine& engine, bool reuse) : reuse_(reuse), session_(engine.new_session()) {}

int64_t SessionCache::reuse(std::span<const int32_t> prompt) {
  size_t common = 0;
  if (reuse_)
    while (common < held_.size() && common + 1 < prompt.size() && held_[common] == prompt[common]) ++common;
  session_->rewind(static_cast<int64_t>(common));  // the last prompt token is always fed: its logits are needed
  held_.resize(common);
  return static_cast<int64_t>(common);
}

void SessionCache::record(std::span<const int32_t> committed) {
  const size_t held = std::min(committed.size(), static_cast<size_t>(session_->position()));
  held_.assign(committed.begin(), committed.begin() + held);
}

}  // namespace deltafin::serve
