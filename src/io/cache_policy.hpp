// Which cached expert goes when the expert store needs room: the policy code the store
// (io/expert_store.hpp) runs, and the one the cache simulator (k3-public-bench/cache_sim.cpp)
// replays routing traces through, so that the simulator's figures are the store's.
//
// Every MoE layer runs once a pass, in order, so an expert of layer l is next needed, at the
// soonest, when the pass comes back to l: its cycle distance (1 for the next layer, L for the
// one running now). Kinds:
//   CycleLru   the layer that comes back last goes first, least recently requested among equals;
//   Frequency  the expected distance to the expert's next use: its cycle distance plus L times the
//              passes expected to skip it, 1/p - 1, with p the share of recent passes through its
//              layer that requested it (counts decayed with a half-life of `half_life` passes);
//   Pinned     the `pinned` most used experts of a usage count (`deltafin run --record-usage`)
//              never go while anything else can; CycleLru among the rest.
// Experts only rejected drafts used (cold) go first under every kind. Ties go by (layer, expert),
// so a choice never depends on a map's order.
#pragma once

#include <cstdint>
#include <vector>

namespace deltafin {

struct CachePolicyOptions {
  enum class Kind { CycleLru, Frequency, Pinned } kind = Kind::CycleLru;
  double half_life = 64;                     // Frequency: passes
  std::vector<std::vector<uint64_t>> usage;  // Pinned: [layer][expert] counts
  uint64_t pinned = 0;                       // Pinned: how many experts
};

// What the policy knows of one cached expert.
struct CacheMeta {
  int64_t layer = 0, expert = 0;
  bool cold = false;       // only rejected drafts used it
  uint64_t last_use = 0;   // the request tick that last asked for it
};

class CachePolicy {
 public:
  CachePolicy(int64_t layers, int64_t experts, CachePolicyOptions options = {});

  void begin_pass();
  void at_layer(int64_t layer) { current_layer_ = layer; }  // the layer now running
  // A pass requests `meta`'s expert (at the layer now running).
  void requested(CacheMeta& meta);
  // Cycle distance until meta's layer runs again (cold: past any layer).
  uint64_t next_use(const CacheMeta& meta) const;
  // Whether `a` should go before `b`.
  bool evict_before(const CacheMeta& a, const CacheMeta& b) const;

  // The entry of `entries` (a map from key to a type with a `meta` member) to evict first among
  // those `evictable` accepts; entries.end() when none is.
  template <class Map, class Evictable>
  typename Map::const_iterator victim(const Map& entries, Evictable&& evictable) const {
    auto best = entries.end();
    for (auto it = entries.begin(); it != entries.end(); ++it)
      if (evictable(it->second) && (best == entries.end() || evict_before(it->second.meta, best->second.meta))) best = it;
    return best;
  }

 private:
  double score(const CacheMeta& meta) const;  // larger goes first

  int64_t layers_, experts_;
  CachePolicyOptions options_;
  int64_t current_layer_ = 0;
  uint64_t tick_ = 0;
  // Frequency: decayed request counts per (layer, expert) and passes, both in units that grow by
  // `growth_` a pass (so that decay costs nothing per entry; rescaled before they overflow).
  std::vector<double> counts_;
  double passes_ = 0, weight_ = 1, growth_ = 1;
  std::vector<char> pinned_;  // Pinned: [layer * experts + expert]
};

}  // namespace deltafin
