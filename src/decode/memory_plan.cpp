// The memory plan (see memory_plan.hpp).
#include "decode/memory_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "util/error.hpp"
#include "util/human_bytes.hpp"
#include "util/memory_available.hpp"

namespace deltafin {
namespace {

// Units resident (largest first, ties by first use) within `room`.
std::vector<bool> choose_resident(const std::vector<SpineUnit>& units, uint64_t room) {
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return units[a].bytes > units[b].bytes; });
  std::vector<bool> resident(units.size(), false);
  for (size_t u : order)
    if (units[u].bytes <= room) resident[u] = true, room -= units[u].bytes;
  return resident;
}

uint64_t largest_streamed(const std::vector<SpineUnit>& units, const std::vector<bool>& resident) {
  uint64_t largest = 0;
  for (size_t u = 0; u < units.size(); ++u)
    if (!resident[u]) largest = std::max(largest, units[u].bytes);
  return largest;
}

// The split of `room` into resident units and a window of `slots` streamed units that minimises
// the bytes streamed; nullopt when not even the window fits. Shrinking the window to the largest
// unit actually streamed frees room for more resident units, so the choice is repeated while
// it improves and stays valid.
std::optional<std::pair<std::vector<bool>, uint64_t>> split_spine(const std::vector<SpineUnit>& units, uint64_t room, int slots) {
  std::optional<std::pair<std::vector<bool>, uint64_t>> best;
  uint64_t best_streamed = UINT64_MAX;
  uint64_t window = slots * largest_streamed(units, std::vector<bool>(units.size(), false));
  for (int round = 0; round < 4 && window <= room; ++round) {
    std::vector<bool> resident = choose_resident(units, room - window);
    const uint64_t need = slots * largest_streamed(units, resident);
    uint64_t streamed = 0;
    for (size_t u = 0; u < units.size(); ++u) streamed += resident[u] ? 0 : units[u].bytes;
    if (need <= window && streamed < best_streamed) best = {{resident, need}}, best_streamed = streamed;
    if (need >= window) break;
    window = need;
  }
  return best;
}

// The pass (see plan_budget): whole when it fits half of what the budget leaves beyond `keep`
// and a 1-position pass, else the most positions that fit.
void size_pass(const BudgetInput& in, uint64_t keep, BudgetPlan& p) {
  const PassActivations& a = in.activations;
  const uint64_t one = a.bytes(1);
  const uint64_t share = in.budget > keep + one ? one + (in.budget - keep - one) / 2 : one;
  p.pass_positions = a.positions_within(share, std::clamp<int64_t>(in.pass_positions_wanted, 1, kMaxPassPositions));
  p.pass_activations = a.bytes(p.pass_positions);
}

}  // namespace

std::vector<SpineUnit> spine_units(const ModelBytes& b) {
  std::vector<SpineUnit> units{{"embedding", b.spine_embed}};
  for (size_t l = 0; l < b.spine_layers.size(); ++l) units.push_back({"layer " + std::to_string(l), b.spine_layers[l]});
  units.push_back({"head", b.spine_head});
  return units;
}

uint64_t working_reserve(uint64_t spine) { return std::clamp<uint64_t>(spine / 4, 32'000'000, 256'000'000); }

BudgetPlan plan_budget(const BudgetInput& in, const std::string& what) {
  BudgetPlan p;
  p.budget = in.budget;
  uint64_t fixed = in.state + in.reserve + in.others;
  const uint64_t one = in.activations.bytes(1);  // a 1-position pass
  const uint64_t slot = in.all_experts ? in.expert_slot : 0;
  const auto largest = std::max_element(in.units.begin(), in.units.end(),
                                        [](const SpineUnit& a, const SpineUnit& b) { return a.bytes < b.bytes; });
  const uint64_t largest_bytes = largest == in.units.end() ? 0 : largest->bytes;
  p.minimum = largest_bytes + slot + fixed + one;
  std::string parts = fmt::format("{} of the largest spine unit ({}), {} for one expert, {} of KV cache and state, {} of working memory, "
                                  "{} of activations for a 1-position pass",
                                  human_bytes(largest_bytes), largest == in.units.end() ? "none" : largest->name,
                                  human_bytes(slot), human_bytes(in.state), human_bytes(in.reserve), human_bytes(one));
  if (in.others) parts += fmt::format(", {} for the draft model", human_bytes(in.others));
  if (in.budget < p.minimum)
    fail("{}: below the minimum working set of {} ({}); give at least {} {}", what, human_bytes(p.minimum), parts, in.flag,
         std::ceil(p.minimum / 1e5) / 1e4);

  // The experts' share before the spine's: a fixed --cache-gb, else one layer's selection.
  const bool fixed_cap = in.expert_cap && in.cap_fixed;
  const uint64_t cap = std::min(in.expert_cap.value_or(UINT64_MAX), in.all_experts);
  size_pass(in, fixed + largest_bytes + (fixed_cap ? cap : std::min(cap, std::max<int64_t>(1, in.top_k) * slot)), p);
  fixed += p.pass_activations;
  uint64_t floor = fixed_cap ? cap : std::min(cap, std::max<int64_t>(1, in.top_k) * slot);
  if (!fixed_cap) floor = std::clamp(in.budget - fixed - largest_bytes, std::min(slot, floor), floor);
  if (fixed_cap && cap + fixed + largest_bytes > in.budget)
    fail("{}: --cache-gb {:.4g} leaves {} for the spine beside {} of KV cache and state, {} of working memory{}: less than "
         "its largest unit ({}, {}); at most --cache-gb {:.4g}",
         what, *in.expert_cap / 1e9, human_bytes(in.budget - std::min(in.budget, cap + fixed)), human_bytes(in.state),
         human_bytes(in.reserve), in.others ? fmt::format(" and {} for the draft model", human_bytes(in.others)) : "",
         largest->name, human_bytes(largest_bytes), (in.budget - fixed - largest_bytes) / 1e9);
  const uint64_t room = in.budget - fixed - floor;

  uint64_t total = 0;
  for (const SpineUnit& u : in.units) total += u.bytes;
  if (total <= room) {
    p.resident.assign(in.units.size(), true);
  } else {
    p.window_units = 2;
    auto split = split_spine(in.units, room, 2);
    if (!split) split = split_spine(in.units, room, 1), p.window_units = 1;
    if (!split) fail("{}: the spine's window does not fit ({})", what, parts);  // the minimum rules this out
    p.resident = std::move(split->first);
    p.window = split->second;
  }
  for (size_t u = 0; u < in.units.size(); ++u) (p.resident[u] ? p.spine_resident : p.spine_streamed) += in.units[u].bytes;
  const uint64_t rest = in.budget - fixed - p.spine_resident - p.window;
  p.experts = fixed_cap ? cap : std::min(cap, rest);
  p.expert_hit_rate = in.all_experts ? static_cast<double>(p.experts) / in.all_experts : 1.0;
  p.spine_read_per_token = p.spine_streamed;
  p.expert_read_per_token = static_cast<uint64_t>(in.routed_per_token * (1.0 - p.expert_hit_rate) + 0.5);
  return p;
}

void plan_host(BudgetPlan& p, const std::vector<SpineUnit>& units, uint64_t host_budget, uint64_t host_fixed,
               const std::string& what) {
  p.two_pools = true;
  p.host_budget = host_budget, p.host_fixed = host_fixed;
  p.host_held.assign(units.size(), false);
  // Streamed units only, in first-use order, for choose_resident.
  std::vector<SpineUnit> streamed;
  std::vector<size_t> at;
  for (size_t u = 0; u < units.size(); ++u)
    if (!p.resident[u]) streamed.push_back(units[u]), at.push_back(u);
  // The least that runs: the fixed share and either every streamed unit held or the window.
  p.host_minimum = host_fixed + std::min(p.window, p.spine_streamed);
  if (host_budget < p.host_minimum)
    fail("{}: below the host's share of {} ({} of working memory and expert staging{}); give at least --memory-gb {}", what,
         human_bytes(p.host_minimum), human_bytes(host_fixed),
         p.spine_streamed ? fmt::format(", {} for the streamed spine", human_bytes(p.host_minimum - host_fixed)) : "",
         std::ceil(p.host_minimum / 1e5) / 1e4);
  const uint64_t room = host_budget - host_fixed;
  if (p.spine_streamed > room) p.host_window = p.window;  // room >= window here (the minimum)
  const std::vector<bool> held = choose_resident(streamed, room - p.host_window);
  for (size_t i = 0; i < streamed.size(); ++i)
    if (held[i]) p.host_held[at[i]] = true, p.spine_host += streamed[i].bytes;
  p.spine_read_per_token = p.spine_streamed - p.spine_host;
  p.upload_per_token = p.spine_streamed + p.expert_read_per_token;
}

DefaultBudget default_device_budget(uint64_t device_free, uint64_t device_size, int sharers) {
  const uint64_t margin = std::max<uint64_t>(device_size / 50, 512'000'000);
  DefaultBudget budget{device_free > margin ? device_free - margin : 0,
                       "the device's free memory less 2% of its size, at least 512 MB"};
  if (sharers > 1) {
    budget.bytes /= static_cast<uint64_t>(sharers);
    budget.source += fmt::format(", split between the {} ranks of this run on the device", sharers);
  }
  return budget;
}

std::optional<DefaultBudget> default_memory_budget() {
  const auto avail = memory_available();
  if (!avail) return std::nullopt;
  if (std::getenv("DELTAFIN_MEMORY_GB")) return DefaultBudget{avail->bytes, avail->source};
  const uint64_t headroom = std::max<uint64_t>(avail->bytes / 20, 256'000'000);
  return DefaultBudget{avail->bytes > headroom ? avail->bytes - headroom : 0, avail->source + " less 5% headroom, at least 256 MB"};
}

}  // namespace deltafin
