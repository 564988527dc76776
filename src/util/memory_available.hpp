// How much memory this process can still take: what the machine and its cgroup allow.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace deltafin {

struct MemoryAvailable {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable", "the cgroup limit /sys/fs/cgroup/.../memory.max", "DELTAFIN_MEMORY_GB"
};

// min(MemAvailable of /proc/meminfo, the room every cgroup above this process leaves: its limit
// (v2 memory.max and memory.high, v1 memory.limit_in_bytes) minus its usage, the process's own
// cgroup and each ancestor's); DELTAFIN_MEMORY_GB=<GB> replaces both (to cap a run, and for
// tests). nullopt where neither is known (macOS, no /proc).
std::optional<MemoryAvailable> memory_available();

}  // namespace deltafin
