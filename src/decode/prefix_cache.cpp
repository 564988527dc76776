// The engine's persistent prefix cache (see prefix_cache.hpp).
#include "decode/prefix_cache.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace deltafin {
namespace {

uint64_t budget_bytes(const std::string& dir, double gb) {
  if (!(gb > 0) || !std::isfinite(gb) || gb > 1e9) fail("prefix cache {}: the budget must be a positive number of GB (got {})", dir, gb);
  return static_cast<uint64_t>(gb * 1e9);
}

}  // namespace

PrefixCache::PrefixCache(const std::string& dir, double gb, Engine& engine)
    : store_(dir, budget_bytes(dir, gb), engine.state_fingerprint(), kPrefixStateFormat),
      append_only_(engine.summary().append_only_state) {}

int64_t PrefixCache::restore(Session& session, std::span<const int32_t> prompt) {
  if (prompt.size() < 2) return 0;
  std::lock_guard lock(mutex_);
  // An entry of the whole prompt serves all but its last position when the state is append-only
  // (K2: loaded, then rewound by one); else the longest shorter one is needed.
  std::optional<PrefixHit> hit = store_.longest_prefix(append_only_ ? prompt : prompt.first(prompt.size() - 1));
  if (!hit) return 0;
  try {
    session.load_state(prompt.first(hit->positions), hit->state());
  } catch (const Error& e) {  // a checksummed entry of this fingerprint: only another engine build writes such
    spdlog::warn("prefix cache: {}: {}; ignored", hit->path, e.what());
    ++stats_.ignored;  // the store's own are added in stats()
    return 0;
  }
  const int64_t positions = std::min<int64_t>(static_cast<int64_t>(hit->positions), static_cast<int64_t>(prompt.size()) - 1);
  if (positions < session.position()) session.rewind(positions);
  ++stats_.hits;
  stats_.positions_saved += static_cast<uint64_t>(positions);
  return positions;
}

bool PrefixCache::saved(std::span<const int32_t> held) {
  std::lock_guard lock(mutex_);
  return store_.touch(held);
}

void PrefixCache::save(Session& session, std::span<const int32_t> held) {
  if (static_cast<int64_t>(held.size()) != session.position())
    fail("prefix cache: {} tokens given for a session at position {}", held.size(), session.position());
  if (held.empty() || saved(held)) return;
  const std::vector<std::byte> state = session.save_state();
  save(held, state);
}

void PrefixCache::save(std::span<const int32_t> held, std::span<const std::byte> state) {
  std::lock_guard lock(mutex_);
  try {
    if (store_.put(held, state)) ++stats_.saves, stats_.bytes_written += state.size();
  } catch (const Error& e) {  // a full disk, say: the output does not depend on the cache
    spdlog::warn("{}; the state was not saved", e.what());
  }
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard lock(mutex_);
  PrefixCacheStats s = stats_;
  s.evictions = store_.counts().evictions;
  s.ignored += store_.counts().ignored;
  return s;
}

}  // namespace deltafin
