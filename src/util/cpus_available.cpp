// See cpus_available.hpp.
#include "util/cpus_available.hpp"

#include "util/cgroup_dirs.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace deltafin {
namespace {

#if defined(__linux__)
// CPUs a quota of `quota` per `period` microseconds keeps busy, rounded up; nullopt for none.
std::optional<int> quota_cpus(double quota, double period) {
  if (!(quota > 0) || !(period > 0)) return std::nullopt;
  return std::max(1, static_cast<int>(std::ceil(quota / period - 1e-9)));
}

// v2: "max 100000" or "150000 100000".
std::optional<int> cpu_max(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  return quota_cpus(std::strtod(quota.c_str(), nullptr), period);
}

// v1: cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us.
std::optional<int> cfs_quota(const std::filesystem::path& dir) {
  std::ifstream q(dir / "cpu.cfs_quota_us"), p(dir / "cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (!(q >> quota) || !(p >> period)) return std::nullopt;
  return quota_cpus(quota, period);
}

// The smallest quota of a cgroup and its ancestors up to the hierarchy's root.
template <class Read>
std::optional<int> smallest_quota(const std::filesystem::path& root, const std::string& cgroup_path, Read read) {
  std::optional<int> best;
  for (const auto& dir : cgroup_dirs_up(root, cgroup_path))
    if (const auto q = read(dir); q && (!best || *q < *best)) best = q;
  return best;
}

std::optional<int> cgroup_cpus() {
  std::optional<int> best;
  const auto take = [&best](std::optional<int> q) {
    if (q && (!best || *q < *best)) best = q;
  };
  if (const std::string v2 = cgroup_v2_path(); !v2.empty())
    take(smallest_quota("/sys/fs/cgroup", v2, [](const auto& d) { return cpu_max(d / "cpu.max"); }));
  if (const std::string v1 = cgroup_v1_path("cpu"); !v1.empty())
    for (const char* root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) take(smallest_quota(root, v1, cfs_quota));
  return best;
}
#endif

}  // namespace

int cpus_available() {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) > 0) cpus = CPU_COUNT(&mask);
  if (const auto quota = cgroup_cpus()) cpus = std::min(cpus, *quota);
#endif
  return std::max(cpus, 1);
}

}  // namespace deltafin
