// Where this process lies in the cgroup hierarchies, and the directories from its cgroup up to a
// hierarchy's root: a limit set on a parent binds its children too (memory_available.cpp and
// cpus_available.cpp walk them).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace deltafin {

// This process's cgroup in the v2 hierarchy ("0::/path" of /proc/self/cgroup), "" where none.
std::string cgroup_v2_path();
// Its cgroup in the v1 hierarchy that has `controller` ("memory", "cpu"), "" where none.
std::string cgroup_v1_path(const std::string& controller);
// root/cgroup_path and each directory above it up to and including root, the deepest first.
std::vector<std::filesystem::path> cgroup_dirs_up(const std::filesystem::path& root, const std::string& cgroup_path);

}  // namespace deltafin
