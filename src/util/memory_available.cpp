// See memory_available.hpp.
#include "util/memory_available.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "util/cgroup_dirs.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

// The first number in a file ("max" or a missing file: nullopt).
std::optional<uint64_t> read_number(const std::filesystem::path& path) {
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

// A limit minus a usage; nullopt when there is no limit ("max", a missing file, or v1's
// "unlimited" of about 2^63).
std::optional<uint64_t> room(std::optional<uint64_t> limit, std::optional<uint64_t> used) {
  if (!limit || *limit >= (uint64_t{1} << 60)) return std::nullopt;
  const uint64_t u = used.value_or(0);
  return *limit > u ? *limit - u : 0;
}

struct Room {
  uint64_t bytes;
  std::string where;  // the cgroup directory whose limit leaves the least room
};

// The smallest room of a cgroup and each of its ancestors up to the hierarchy's root: a limit
// set on a parent binds its children as well. `files` lists the (limit, usage) file pairs.
std::optional<Room> smallest_room(const std::filesystem::path& root, const std::string& cgroup_path,
                                  std::initializer_list<std::pair<const char*, const char*>> files) {
  std::optional<Room> best;
  for (const auto& dir : cgroup_dirs_up(root, cgroup_path))
    for (const auto& [limit, usage] : files)
      if (auto r = room(read_number(dir / limit), read_number(dir / usage)); r && (!best || *r < best->bytes))
        best = Room{*r, (dir / limit).string()};
  return best;
}

// The room the cgroups of this process leave: v2 (memory.max and memory.high, at every level)
// and v1 (memory.limit_in_bytes, at every level of the memory controller's hierarchy).
std::optional<Room> cgroup_room() {
  const std::string v2_path = cgroup_v2_path(), v1_path = cgroup_v1_path("memory");
  std::optional<Room> best;
  const auto take = [&best](std::optional<Room> r) {
    if (r && (!best || r->bytes < best->bytes)) best = r;
  };
  if (!v2_path.empty())
    take(smallest_room("/sys/fs/cgroup", v2_path, {{"memory.max", "memory.current"}, {"memory.high", "memory.current"}}));
  if (!v1_path.empty())
    take(smallest_room("/sys/fs/cgroup/memory", v1_path, {{"memory.limit_in_bytes", "memory.usage_in_bytes"}}));
  return best;
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
  if (cgroup && (!meminfo || cgroup->bytes < *meminfo)) return MemoryAvailable{cgroup->bytes, "the cgroup limit " + cgroup->where};
  if (meminfo) return MemoryAvailable{*meminfo, "MemAvailable"};
  return std::nullopt;
}

}  // namespace deltafin
