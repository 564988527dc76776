// The memory budgets and how they are shared: the spine (resident, or streamed a unit at a time
// through a window), the routed-expert cache, the KV cache and state, a draft model's share and
// working memory. Where the backend has one pool (CPU, Metal: Backend::memory_pools) that is the
// one budget, --memory-gb. Where the device has memory of its own the host cannot write (CUDA),
// plan_budget shares the device's budget (--device-memory-gb) and plan_host then routes the
// units the device streams through host memory (--memory-gb): held there where they fit, else
// read from the drives each pass. A pure function of sizes, so `deltafin inspect` (config.json
// alone) and Engine::open compute the same plan. docs/memory-budget.md works it by hand for K3,
// docs/cuda.md for K3 on one GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weights/model_size.hpp"

namespace deltafin {

// A piece of the spine that is resident or streamed as a whole: the embedding, one layer, the head.
struct SpineUnit {
  std::string name;    // "embedding", "layer 7", "head"
  uint64_t bytes = 0;  // what it holds resident; a streamed unit reads this much each pass
};

struct BudgetInput {
  uint64_t budget = 0;                // --memory-gb, or the machine's default
  std::vector<SpineUnit> units;       // in the order a pass first uses them
  uint64_t state = 0;                 // KV cache and recurrent state for the planned positions
  uint64_t reserve = 0;               // working memory (activations, I/O buffers, the runtime)
  uint64_t others = 0;                // held for others in the process (a draft model)
  uint64_t expert_slot = 0;           // one expert's buffer (the largest record, 4 KiB-aligned)
  uint64_t all_experts = 0;           // every expert in a slot at once (more is never used)
  uint64_t routed_per_token = 0;      // expert bytes one position selects (MoE layers x top-k)
  int64_t top_k = 0;                  // experts a layer selects per position
  std::optional<uint64_t> expert_cap; // an upper bound on the expert share
  bool cap_fixed = false;             // --cache-gb given: the share is exactly the cap, refused when it does not fit
  std::string flag = "--memory-gb";   // the budget's flag, for the messages
  // Prefill passes: the activations of a pass (from config.json) and the positions a pass would
  // cover at most (the planned positions, under --chunk); the plan gives the pass its size.
  PassActivations activations;
  int64_t pass_positions_wanted = 1;
};

// The most positions one pass takes whatever the budget (the CUDA attention kernel's grid limit).
constexpr int64_t kMaxPassPositions = 65535;

struct BudgetPlan {
  uint64_t budget = 0;
  std::vector<bool> resident;          // per unit
  uint64_t spine_resident = 0, spine_streamed = 0;
  uint64_t window = 0;                 // memory the streamed units pass through (two of the largest)
  int window_units = 0;                // 2: the next unit is read while one runs; 1: read in turn
  uint64_t experts = 0;                // the expert cache's budget
  uint64_t minimum = 0;                // the smallest budget that runs at all
  // Per decode pass (one position): every streamed unit once, and the experts a position
  // selects that miss a cache this size under uniform use (hit rate = experts / all experts).
  double expert_hit_rate = 0;
  uint64_t spine_read_per_token = 0;
  uint64_t expert_read_per_token = 0;
  uint64_t read_per_token() const { return spine_read_per_token + expert_read_per_token; }
  // The prefill pass: its positions and the activation bytes the plan counts for it.
  int64_t pass_positions = 1;
  uint64_t pass_activations = 0;

  // Two pools (plan_host): the budget above is the device's; the streamed units pass through
  // host memory, held there (host_held) where the host budget allows after its fixed share
  // (working memory, the expert staging slots), else read from the drives each pass into pinned
  // staging as large as the device's window (host_window). spine_read_per_token is then what the
  // drives give; every streamed byte and every expert miss is copied to the device each pass.
  bool two_pools = false;
  uint64_t host_budget = 0, host_fixed = 0;
  std::vector<bool> host_held;         // per unit
  uint64_t spine_host = 0;             // bytes of the host-held units
  uint64_t host_window = 0;
  uint64_t host_minimum = 0;           // the smallest host budget that runs this device plan
  uint64_t upload_per_token = 0;       // host to device per decode pass
};

// Recurrent-state snapshots a session keeps for rewinds (decode/model_engine.hpp).
constexpr uint64_t kRecurrentSnapshots = 4;
// The KV cache for `positions` and the recurrent state, live and in every snapshot.
inline uint64_t planned_state_bytes(const ModelBytes& b, int64_t positions) {
  return static_cast<uint64_t>(positions) * b.kv_per_position + b.recurrent_state * (1 + kRecurrentSnapshots);
}

// The units of a model's spine from its bytes (weights/model_size.hpp), in first-use order.
std::vector<SpineUnit> spine_units(const ModelBytes& b);

// Shares `in.budget`. Throws a one-line deltafin::Error starting with `what` (the model and the
// budget: "DIR: --memory-gb 4") when the budget is below the minimum working set (the largest
// unit, one expert, the state, working memory, a 1-position pass's activations and others) or
// when a fixed expert share leaves less than the largest unit for the spine.
//
// The prefill pass is sized first: a pass reads the union of the experts its positions chose
// and every streamed spine unit once, so a prompt in one pass reads each routed expert at most
// once, and one in P passes up to P times. The pass covers pass_positions_wanted (the whole
// planned prompt) when its activations fit in half of what the budget leaves beyond the
// minimum working set with the experts' one layer's selection (top_k slots); else the most
// positions whose activations fit that half (at least one). The other half stays with the
// spine and the expert cache, which every decode step reads through.
//
// The spine comes first: a resident spine byte saves one byte read every pass, an expert-cache
// byte saves top_k / experts of one (uniform use). So experts get one layer's selection (top_k
// slots) at least, then the spine takes what it can in its window-and-resident split, then the
// experts the rest. Resident units are chosen largest first (ties: first use) to minimise the
// bytes read per pass; the window holds two streamed units so the next one is read while the
// current one computes.
BudgetPlan plan_budget(const BudgetInput& in, const std::string& what);

// Two pools: routes the units `p` streams (p = plan_budget of the device's budget) through host
// memory of `host_budget` bytes, `host_fixed` of which is taken. Units are held largest first
// (ties: first use), so the drives give the fewest bytes per pass. Throws a one-line
// deltafin::Error starting with `what` ("DIR: --memory-gb 64") when the host cannot hold its
// fixed share and either every streamed unit or the window the drives stream through.
void plan_host(BudgetPlan& p, const std::vector<SpineUnit>& units, uint64_t host_budget, uint64_t host_fixed,
               const std::string& what);

// The host's fixed share with two pools: working memory and `staging_slots` expert staging slots.
inline uint64_t host_fixed_bytes(uint64_t spine, uint64_t expert_slot, uint64_t staging_slots);

// Working memory (activations, I/O buffers, the runtime): a quarter of the spine, 32 MB to 256 MB.
uint64_t working_reserve(uint64_t spine);

// An expert host's (an MPI rank above 0, src/hosts) routed-expert cache under a budget of
// `budget` bytes: all but 5 % and 256 MiB (the passes' rows and outputs), at most `all_experts`.
inline uint64_t expert_host_cache(uint64_t budget, uint64_t all_experts) {
  const uint64_t reserve = budget / 20 + (uint64_t{256} << 20);
  return budget > reserve ? std::min(all_experts, budget - reserve) : 0;
}

// The default --memory-gb: what the machine and its cgroup have free (util/memory_available),
// less headroom for the rest of the system (5%, at least 256 MB; none when DELTAFIN_MEMORY_GB
// states the figure). `source` says where it came from. nullopt where nothing is known (no
// /proc), and then the budget is unchecked.
struct DefaultBudget {
  uint64_t bytes = 0;
  std::string source;
};
std::optional<DefaultBudget> default_memory_budget();

// The default --device-memory-gb: the device's free memory less a margin for what the plan does
// not see (the CUDA context's later growth, other processes on the device): 2% of its size, at
// least 512 MB; split evenly when `sharers` ranks of this run share the device.
DefaultBudget default_device_budget(uint64_t device_free, uint64_t device_size, int sharers = 1);

inline uint64_t host_fixed_bytes(uint64_t spine, uint64_t expert_slot, uint64_t staging_slots) {
  return working_reserve(spine) + staging_slots * expert_slot;
}

}  // namespace deltafin
