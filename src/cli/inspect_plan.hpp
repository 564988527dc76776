// `deltafin inspect --memory-gb G [--device-memory-gb D] [--drive-gbps X,Y,...] [--positions N] [--chunk N]`:
// the memory plan of a model from its config.json alone (decode/memory_plan.hpp, the same
// functions Engine::open uses): what is resident and what streams, the prefill pass (its
// positions and activations), the bytes one decode token reads, and the tokens per second the drives allow. With --device-memory-gb, the plan of a
// device with memory of its own (CUDA): which spine units are resident on it, which stream from
// host memory (--memory-gb; unbounded without it) and which from the drives, and the bytes a
// token copies to the device. docs/memory-budget.md checks the real K3 by hand, docs/cuda.md K3
// on one GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decode/memory_plan.hpp"
#include "model/family.hpp"

namespace deltafin::cli {

struct PlanFlags {
  double memory_gb = 0;            // 0: no plan printed (without device_memory_gb)
  double device_memory_gb = 0;     // 0: one pool
  std::string drive_gbps;          // "3.2,3.2": each drive's read rate in GB/s
  int64_t positions = 4096;        // KV cache and state planned for (and the prompt a prefill pass would cover)
  int64_t chunk = 0;               // --chunk: the most positions a pass takes (0: the plan decides)
};

// What the plan lines said, for the projection over several hosts (inspect_hosts.hpp).
struct PrintedPlan {
  BudgetPlan plan;
  uint64_t expert_slot = 0;         // one expert record, 4 KiB-aligned
  std::vector<double> drive_gbps;   // each drive's read rate
};

// Prints the plan lines (nothing without --memory-gb or --device-memory-gb: then nullopt); throws
// a one-line deltafin::Error naming the flag on bad values.
std::optional<PrintedPlan> print_memory_plan(const FamilyDescription& d, const PlanFlags& f);

}  // namespace deltafin::cli
