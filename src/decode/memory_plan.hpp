// The one memory budget (--memory-gb) and how it is shared: the spine (resident, or streamed a
// unit at a time through a window), the routed-expert cache, the KV cache and state, a draft
// model's share and working memory. A pure function of sizes, so `deltafin inspect` (config.json
// alone) and Engine::open compute the same plan. docs/memory-budget.md works it by hand for K3.
#pragma once

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
};

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
// unit, one expert, the state, working memory and others) or when a fixed expert share leaves
// less than the largest unit for the spine.
//
// The spine comes first: a resident spine byte saves one byte read every pass, an expert-cache
// byte saves top_k / experts of one (uniform use). So experts get one layer's selection (top_k
// slots) at least, then the spine takes what it can in its window-and-resident split, then the
// experts the rest. Resident units are chosen largest first (ties: first use) to minimise the
// bytes read per pass; the window holds two streamed units so the next one is read while the
// current one computes.
BudgetPlan plan_budget(const BudgetInput& in, const std::string& what);

// Working memory (activations, I/O buffers, the runtime): a quarter of the spine, 32 MB to 256 MB.
uint64_t working_reserve(uint64_t spine);

// The default --memory-gb: what the machine and its cgroup have free (util/memory_available),
// less headroom for the rest of the system (5%, at least 256 MB; none when DELTAFIN_MEMORY_GB
// states the figure). `source` says where it came from. nullopt where nothing is known (no
// /proc), and then the budget is unchecked.
struct DefaultBudget {
  uint64_t bytes = 0;
  std::string source;
};
std::optional<DefaultBudget> default_memory_budget();

}  // namespace deltafin
