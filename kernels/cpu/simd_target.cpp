// Run-time choice of the kernels' SIMD target (see simd_target.hpp), on Highway's dispatch: every
// HWY_DYNAMIC_DISPATCH call takes the best target in the mask set here.
#include "cpu/simd_target.hpp"

#include <cstdlib>

#include <hwy/highway.h>
#include <hwy/targets.h>

#include <deltafin/error.hpp>
#include <fmt/format.h>

namespace deltafin::cpu {
namespace {

struct Target {
  std::string name;
  int64_t bit;
};

// Compiled-in targets the CPU supports, best first, detected before any selection masks them.
const std::vector<Target>& targets() {
  static const std::vector<Target> list = [] {
    std::vector<Target> out;
    for (int64_t bit : hwy::SupportedAndGeneratedTargets()) out.push_back({hwy::TargetName(bit), bit});
    return out;
  }();
  return list;
}

std::string joined_names() {
  std::string s;
  for (const Target& t : targets()) {
    if (!s.empty()) s += ' ';
    s += t.name;
  }
  return s;
}

std::string& current_name() {
  static std::string name = targets().front().name;
  return name;
}

}  // namespace

const std::vector<std::string>& simd_available() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Target& t : targets()) out.push_back(t.name);
    return out;
  }();
  return names;
}

std::string simd_current() { return current_name(); }

void simd_select(const std::string& name) {
  for (const Target& t : targets()) {
    if (t.name != name) continue;
    // The best target needs no mask: plain detection picks it.
    hwy::SetSupportedTargetsForTest(&t == &targets().front() ? 0 : t.bit);
    current_name() = t.name;
    return;
  }
  throw Error(fmt::format("DELTAFIN_SIMD={}: not a SIMD target this build runs on this CPU (available: {})", name, joined_names()));
}

void simd_select_from_env() {
  const char* name = std::getenv("DELTAFIN_SIMD");
  if (name != nullptr && *name != '\0') simd_select(name);
}

std::string simd_summary() { return "simd: " + simd_current() + " (available: " + joined_names() + ")"; }

}  // namespace deltafin::cpu
