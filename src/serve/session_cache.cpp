// The server's session cache (see session_cache.hpp).
#include "serve/session_cache.hpp"

#include <algorithm>

namespace deltafin::serve {

SessionCache::SessionCache(Engine& engine, int64_t chunk, bool reuse)
    : chunk_(std::max<int64_t>(chunk, 1)), reuse_(reuse), session_(engine.new_session()) {}

void SessionCache::record(std::span<const int32_t> committed) {
  const size_t held = std::min(committed.size(), static_cast<size_t>(session_->position()));
  held_.assign(committed.begin(), committed.begin() + held);
}

}  // namespace deltafin::serve
