// How many CPUs this process can keep busy at once: the machine, narrowed by its affinity mask
// (taskset, a container's cpuset) and by a CPU quota on any of its cgroups (docker --cpus).
#pragma once

namespace deltafin {

// At least 1. Linux: min(CPUs in sched_getaffinity's mask, ceil(quota / period) of every cgroup
// from this process's up to the root: v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us);
// elsewhere std::thread::hardware_concurrency().
int cpus_available();

}  // namespace deltafin
