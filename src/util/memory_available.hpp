// How much memory this process can still take: what the machine and its cgroup allow.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace deltafin {

struct MemoryAvailable {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable", "the cgroup limit", "DELTAFIN_MEMORY_GB"
};

// min(MemAvailable of /proc/meminfo, the cgroup v2 memory.max or v1 memory.limit_in_bytes minus
// the cgroup's current usage); DELTAFIN_MEMORY_GB=<GB> replaces both (to cap a run, and for
// tests). nullopt where neither is known (macOS, no /proc).
std::optional<MemoryAvailable> memory_available();

}  // namespace deltafin
