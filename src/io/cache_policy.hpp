// Which cached expert goes when the expert store needs room: the policy code the store
// (io/expert_store.hpp) runs, and the one the cache simulator (io/cache_simulator.hpp,
// k3-public-bench/cache_sim) replays routing traces through, so that the simulator's figures are
// the store's.
//
// Every MoE layer runs once a pass, in order, so an expert of layer l is next needed, at the
// soonest, when the pass comes back to l: its cycle distance (1 for the next layer, L for the one
// running now). An expert a share p of recent passes requested is expected back after its cycle
// distance plus L x (1/p - 1) layers (the passes expected to skip it): the expert expected back
// last goes first. p counts the passes through its layer that requested it, decayed with a
// half-life of `half_life` passes (frequency-aware: a popular expert outlives a recent one).
// Experts only rejected drafts used (cold) go before any other. Ties go to the least recently
// requested, then by (layer, expert), so a choice never depends on a map's order.
// Chosen on real routing against cycle distance + LRU and a pinned hot set
// (k3-public-bench/results/routing-policy-experiment.md).
//
// With `next_request` (the simulator's bound, never the store's: it knows the future) the
// expert requested again last goes first instead, Belady's choice: next_request[t] is the tick of
// the next request for the expert requested at tick t.
#pragma once

#include <cstdint>
#include <vector>

namespace deltafin {

struct CachePolicyOptions {
  double half_life = 32;               // passes
  std::vector<uint64_t> next_request;  // the oracle: indexed by request tick (1-based); empty: none
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
  // The entry of `entries` (a map from key to a type with a `meta` member) to evict first among
  // those `evictable` accepts; entries.end() when none is.
  template <class Map, class Evictable>
  typename Map::const_iterator victim(const Map& entries, Evictable&& evictable) const {
    auto best = entries.end();
    double best_return = 0;
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      if (!evictable(it->second)) continue;
      const double r = expected_return(it->second.meta);
      if (best == entries.end() || goes_before(r, it->second.meta, best_return, best->second.meta)) best = it, best_return = r;
    }
    return best;
  }

 private:
  double expected_return(const CacheMeta& meta) const;  // in layers; larger goes first
  // Whether `a` (expected back after ra) goes before `b` (after rb).
  static bool goes_before(double ra, const CacheMeta& a, double rb, const CacheMeta& b);

  int64_t layers_, experts_;
  CachePolicyOptions options_;
  int64_t current_layer_ = 0;
  uint64_t tick_ = 0;
  // Decayed request counts per (layer, expert) and decayed passes, both in units that grow by
  // `growth_` a pass (so that decay costs nothing per entry; rescaled before they overflow).
  std::vector<double> counts_;
  double passes_ = 0, weight_ = 1, growth_ = 1;
};

}  // namespace deltafin
