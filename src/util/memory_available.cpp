// See memory_available.hpp.
#include "util/memory_available.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/error.hpp"

namespace deltafin {
namespace {

// The first number in a file ("max" or a missing file: nullopt).
std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

std::optional<uint64_t> meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return std::nullopt;
}

// The cgroup this process is in: its limit minus its usage.
std::optional<uint64_t> cgroup_room() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a != std::string::npos && b != std::string::npos && line.substr(a + 1, b - a - 1).find("memory") != std::string::npos)
      v1_path = line.substr(b + 1);
  }
  const auto room = [](std::optional<uint64_t> limit, std::optional<uint64_t> used) -> std::optional<uint64_t> {
    if (!limit || *limit >= (uint64_t{1} << 60)) return std::nullopt;  // unlimited
    const uint64_t u = used.value_or(0);
    return *limit > u ? *limit - u : 0;
  };
  if (!v2_path.empty()) {
    const std::string dir = "/sys/fs/cgroup" + v2_path;
    if (auto r = room(read_number(dir + "/memory.max"), read_number(dir + "/memory.current"))) return r;
  }
  if (!v1_path.empty()) {
    const std::string dir = "/sys/fs/cgroup/memory" + v1_path;
    if (auto r = room(read_number(dir + "/memory.limit_in_bytes"), read_number(dir + "/memory.usage_in_bytes"))) return r;
  }
  return std::nullopt;
}

}  // namespace

std::optional<MemoryAvailable> memory_available() {
  if (const char* env = std::getenv("DELTAFIN_MEMORY_GB")) {
    char* end = nullptr;
    const double gb = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(gb > 0 && gb < 1e6)) fail("DELTAFIN_MEMORY_GB={}: not a number of GB", env);
    return MemoryAvailable{static_cast<uint64_t>(gb * 1e9), "DELTAFIN_MEMORY_GB"};
  }
  const auto meminfo = meminfo_available();
  const auto cgroup = cgroup_room();
  if (cgroup && (!meminfo || *cgroup < *meminfo)) return MemoryAvailable{*cgroup, "the cgroup's memory limit"};
  if (meminfo) return MemoryAvailable{*meminfo, "MemAvailable"};
  return std::nullopt;
}

}  // namespace deltafin
