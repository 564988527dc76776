// The server's session cache (see session_cache.hpp).
#include "serve/session_cache.hpp"

#include <algorithm>

namespace deltafin::serve {
namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

SessionCache::SessionCache(Engine& engine, bool reuse, uint64_t budget_bytes)
    : engine_(engine), reuse_(reuse), budget_(budget_bytes), per_position_(engine.summary().state_bytes_per_position) {}

int64_t SessionCache::take(std::span<const int32_t> prompt, int64_t reach) {
  // The held session this prompt continues with the longest common prefix (ties: the most recent).
  size_t best = held_.size(), best_common = 0;
  for (size_t i = 0; reuse_ && i < held_.size(); ++i) {
    const Held& h = held_[i];
    const size_t common = common_prefix(h.tokens, prompt);
    const bool continues = common > 0 && common >= std::min(h.first_prompt, h.tokens.size());
    if (continues && (best == held_.size() || common > best_common ||
                      (common == best_common && h.last_used > held_[best].last_used))) {
      best = i;
      best_common = common;
    }
  }
  if (best == held_.size() && (reuse_ || held_.empty())) {
    held_.push_back(Held{engine_.new_session(), {}, prompt.size(), 0});
    best = held_.size() - 1;
    best_common = 0;
  } else if (best == held_.size()) {
    best = 0;  // no reuse: the one session, from position 0
  }
  current_ = best;
  Held& h = held_[current_];
  h.last_used = ++clock_;
  // The last prompt token is always fed: its logits are needed.
  const size_t kept = prompt.empty() ? 0 : std::min(best_common, prompt.size() - 1);
  h.session->rewind(static_cast<int64_t>(kept));
  h.tokens.resize(kept);
  if (kept < h.first_prompt) h.first_prompt = prompt.size();  // it departs inside its first prompt: this one is its first now
  if (kept > 0) ++hits_, positions_saved_ += kept;
  drop_beyond_budget(std::max(h.session->state_bytes(), per_position_ * static_cast<uint64_t>(std::max<int64_t>(reach, 0))));
  return static_cast<int64_t>(kept);
}

void SessionCache::record(std::span<const int32_t> committed) {
  Held& h = held_[current_];
  const size_t held = std::min(committed.size(), static_cast<size_t>(h.session->position()));
  h.tokens.assign(committed.begin(), committed.begin() + static_cast<std::ptrdiff_t>(held));
  drop_beyond_budget(h.session->state_bytes());
}

void SessionCache::drop_beyond_budget(uint64_t current_bytes) {
  for (;;) {
    uint64_t others = 0;
    size_t oldest = held_.size();
    for (size_t i = 0; i < held_.size(); ++i) {
      if (i == current_) continue;
      others += held_[i].session->state_bytes();
      if (oldest == held_.size() || held_[i].last_used < held_[oldest].last_used) oldest = i;
    }
    if (oldest == held_.size() || others + current_bytes <= budget_) return;
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(oldest));
    if (oldest < current_) --current_;
    ++dropped_;
  }
}

SessionCacheStats SessionCache::stats() const {
  SessionCacheStats s;
  s.hits = hits_;
  s.positions_saved = positions_saved_;
  s.dropped = dropped_;
  s.sessions = held_.size();
  for (const Held& h : held_) s.bytes += h.session->state_bytes();
  s.budget_bytes = budget_;
  return s;
}

}  // namespace deltafin::serve
