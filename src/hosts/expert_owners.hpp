// Which hosts can run each routed expert, in the order rank 0 prefers them.
//   equal_shares: expert e of every layer belongs to host e % hosts; every host can read every
//     expert (each has the checkpoint, or a copy of a one-host placement), so the others follow
//     in rank order after it as fallbacks.
//   from a placement with hosts: the hosts whose drives hold the record, the primary's first.
// lose(host, layer, expert): that host could not read the expert; owner() skips it from then on.
// balance(): who runs each expert of one pass: its preferred holder, unless that host already has
// its even share of the pass (ceil(experts / hosts)); then the holder with the fewest so far.
// A layer waits for its busiest host, so an expert with several holders goes where it evens the
// load; an expert's preferred holder is kept where it can be (its cache is there).
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <tuple>
#include <vector>

namespace deltafin::hosts {

class ExpertOwners {
 public:
  static ExpertOwners equal_shares(int hosts, int64_t layers, int64_t experts);
  // holders[layer * experts + expert]: the hosts holding it, preferred first (empty: not placed).
  ExpertOwners(int hosts, int64_t layers, int64_t experts, std::vector<std::vector<int>> holders);

  int hosts() const { return hosts_; }
  // The preferred host that has not lost it, or -1 when every holder has.
  int owner(int64_t layer, int64_t expert) const;
  // Every host that holds it and has not lost it, preferred first.
  std::vector<int> holders(int64_t layer, int64_t expert) const;
  void lose(int host, int64_t layer, int64_t expert) { lost_.insert({host, layer, expert}); }
  // The host of each of `experts` (one pass at `layer`); -1 where no holder is left.
  std::vector<int> balance(int64_t layer, std::span<const int32_t> experts) const;

 private:
  int hosts_ = 1;
  int64_t layers_ = 0, experts_ = 0;
  std::vector<std::vector<int>> holders_;  // empty: equal shares
  std::set<std::tuple<int, int64_t, int64_t>> lost_;
};

}  // namespace deltafin::hosts
