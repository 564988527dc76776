// ExpertOwners (see expert_owners.hpp).
#include "hosts/expert_owners.hpp"

#include "util/error.hpp"

namespace deltafin::hosts {

ExpertOwners ExpertOwners::equal_shares(int hosts, int64_t layers, int64_t experts) {
  return ExpertOwners(hosts, layers, experts, {});
}

ExpertOwners::ExpertOwners(int hosts, int64_t layers, int64_t experts, std::vector<std::vector<int>> holders)
    : hosts_(hosts), layers_(layers), experts_(experts), holders_(std::move(holders)) {
  if (hosts < 1) fail("a run needs at least one host (got {})", hosts);
  if (!holders_.empty() && holders_.size() != static_cast<size_t>(layers * experts))
    fail("expert owners: {} entries for {} layers of {} experts", holders_.size(), layers, experts);
  for (const auto& h : holders_)
    for (int host : h)
      if (host < 0 || host >= hosts) fail("expert owners: host {} of a run of {} hosts", host, hosts);
}

int ExpertOwners::owner(int64_t layer, int64_t expert) const {
  const std::vector<int> h = holders(layer, expert);
  return h.empty() ? -1 : h.front();
}

std::vector<int> ExpertOwners::holders(int64_t layer, int64_t expert) const {
  std::vector<int> out;
  if (holders_.empty()) {
    const int first = static_cast<int>(expert % hosts_);
    for (int i = 0; i < hosts_; ++i)
      if (const int host = (first + i) % hosts_; !lost_.count({host, layer, expert})) out.push_back(host);
    return out;
  }
  if (layer < 0 || layer >= layers_ || expert < 0 || expert >= experts_) return out;
  for (int host : holders_[static_cast<size_t>(layer * experts_ + expert)])
    if (!lost_.count({host, layer, expert})) out.push_back(host);
  return out;
}

std::vector<int> ExpertOwners::balance(int64_t layer, std::span<const int32_t> experts) const {
  const size_t even = (experts.size() + static_cast<size_t>(hosts_) - 1) / static_cast<size_t>(hosts_);
  std::vector<size_t> load(static_cast<size_t>(hosts_), 0);
  std::vector<int> out;
  out.reserve(experts.size());
  for (int32_t e : experts) {
    const std::vector<int> h = holders(layer, e);
    int pick = h.empty() ? -1 : h.front();
    if (pick >= 0 && load[pick] >= even)
      for (int c : h)
        if (load[c] < load[pick]) pick = c;
    if (pick >= 0) ++load[pick];
    out.push_back(pick);
  }
  return out;
}

}  // namespace deltafin::hosts
