// The server's session cache (see session_cache.hpp).
#include "serve/session_cache.hpp"

#include <algorithm>
#include <cstddef>
#include <system_error>

namespace deltafin::serve {
namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

SessionCache::SessionCache(Engine& engine, bool reuse, uint64_t budget_bytes, PrefixCache* disk)
    : engine_(engine),
      reuse_(reuse),
      disk_(reuse ? disk : nullptr),
      budget_(budget_bytes),
      per_position_(engine.summary().state_bytes_per_position) {}

SessionCache::~SessionCache() { wait_for_writes(); }

void SessionCache::wait_for_writes() {
  for (std::future<void>& w : writes_) w.get();  // (a failed write is the cache's warning, never an exception)
  writes_.clear();
}

void SessionCache::save_to_disk(Session& session, std::span<const int32_t> tokens) {
  if (!disk_ || tokens.empty() || static_cast<int64_t>(tokens.size()) != session.position() || disk_->saved(tokens)) return;
  auto write = [disk = disk_, held = std::vector<int32_t>(tokens.begin(), tokens.end()), state = session.save_state()] {
    disk->save(held, state);
  };
  try {
    writes_.push_back(std::async(std::launch::async, write));
  } catch (const std::system_error&) {  // no thread to be had: written now
    write();
  }
}

int64_t SessionCache::take(std::span<const int32_t> prompt, int64_t reach) {
  wait_for_writes();
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
  // The last prompt token is always fed: its logits are needed.
  size_t kept = prompt.empty() ? 0 : std::min(best_common, prompt.size() - 1);
  if (best == held_.size() && (reuse_ || held_.empty())) {
    held_.push_back(Held{engine_.new_session(), {}, prompt.size(), 0});
    best = held_.size() - 1;
    // A fresh session holds the longest saved prefix of the prompt (shorter than it), if any.
    kept = disk_ ? static_cast<size_t>(disk_->restore(*held_[best].session, prompt)) : 0;
    held_[best].tokens.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(kept));
  } else if (best == held_.size()) {
    best = 0;  // no reuse: the one session, from position 0
  } else {
    Held& h = held_[best];
    h.session->rewind(static_cast<int64_t>(kept));
    h.tokens.resize(kept);
    if (kept < h.first_prompt) h.first_prompt = prompt.size();  // it departs inside its first prompt: this one is its first now
    if (kept > 0) ++hits_, positions_saved_ += kept;
  }
  if (!reuse_) held_[best].session->rewind(0), held_[best].tokens.clear();
  current_ = best;
  Held& h = held_[current_];
  h.last_used = ++clock_;
  drop_beyond_budget(std::max(h.session->state_bytes(), per_position_ * static_cast<uint64_t>(std::max<int64_t>(reach, 0))));
  return static_cast<int64_t>(kept);
}

int64_t SessionCache::prompt_save_point(std::span<const int32_t> prompt) const {
  return disk_ ? disk_->prompt_save_point(prompt) : static_cast<int64_t>(prompt.size());
}

void SessionCache::prompt_prefilled(std::span<const int32_t> prefix) {
  if (held_[current_].session->position() == static_cast<int64_t>(prefix.size())) save_to_disk(*held_[current_].session, prefix);
}

void SessionCache::record(std::span<const int32_t> committed) {
  Held& h = held_[current_];
  const size_t held = std::min(committed.size(), static_cast<size_t>(h.session->position()));
  h.tokens.assign(committed.begin(), committed.begin() + static_cast<std::ptrdiff_t>(held));
  save_to_disk(*h.session, h.tokens);
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
    save_to_disk(*held_[oldest].session, held_[oldest].tokens);  // (its bytes are taken now)
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
  s.disk = disk_ != nullptr;
  if (disk_) s.disk_stats = disk_->stats();
  return s;
}

}  // namespace deltafin::serve
