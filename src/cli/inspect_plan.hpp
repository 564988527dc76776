// `deltafin inspect --memory-gb G [--drive-gbps X,Y,...] [--positions N]`: the memory plan of a
// model from its config.json alone (decode/memory_plan.hpp, the same function Engine::open
// uses): what is resident and what streams, the bytes one decode token reads, and the tokens per
// second the drives allow. docs/memory-budget.md checks the real K3 by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/family.hpp"

namespace deltafin::cli {

struct PlanFlags {
  double memory_gb = 0;            // 0: no plan printed
  std::string drive_gbps;          // "3.2,3.2": each drive's read rate in GB/s
  int64_t positions = 4096;        // KV cache and state planned for
};

// Prints the plan lines; throws a one-line deltafin::Error naming the flag on bad values.
void print_memory_plan(const FamilyDescription& d, const PlanFlags& f);

}  // namespace deltafin::cli
