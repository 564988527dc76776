// See cgroup_dirs.hpp.
#include "util/cgroup_dirs.hpp"

#include <fstream>

namespace deltafin {
namespace {

// Lines of /proc/self/cgroup: "ID:CONTROLLERS:PATH".
std::vector<std::string> self_cgroup_lines() {
  std::ifstream in("/proc/self/cgroup");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::string cgroup_v2_path() {
  for (const std::string& line : self_cgroup_lines())
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

std::string cgroup_v1_path(const std::string& controller) {
  for (const std::string& line : self_cgroup_lines()) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers(",");  // ",cpu,cpuacct," (built by append: GCC 12 warns on "," + string)
    controllers.append(line, a + 1, b - a - 1).append(",");
    if (controllers.find("," + controller + ",") != std::string::npos) return line.substr(b + 1);
  }
  return "";
}

std::vector<std::filesystem::path> cgroup_dirs_up(const std::filesystem::path& root, const std::string& cgroup_path) {
  std::vector<std::filesystem::path> dirs;
  std::filesystem::path dir = (root / std::filesystem::path(cgroup_path).relative_path()).lexically_normal();
  for (;;) {
    dirs.push_back(dir);
    if (dir.native().size() <= root.native().size() || dir.parent_path() == dir) break;  // the root was reached
    dir = dir.parent_path();
  }
  return dirs;
}

}  // namespace deltafin
