// Which SIMD target the CPU kernels run on. Every kernel is compiled for each Highway target the
// build knows (SSSE3, SSE4, AVX2, AVX3, AVX3_DL and the scalar path on x86-64; NEON and the SVE
// variants on arm64) and dispatched at run time: the best target this CPU supports, unless the
// environment variable DELTAFIN_SIMD names another (as spelled by simd_available()).
#pragma once

#include <string>
#include <vector>

namespace deltafin::cpu {

// The targets this build has kernels for and this CPU runs, best first ("AVX3_DL", ..., "SCALAR").
const std::vector<std::string>& simd_available();

// The target the kernels dispatch to now.
std::string simd_current();

// Dispatches every kernel to `name`, one of simd_available(); anything else throws deltafin::Error
// with a one-line message naming the target and the available ones. Not to be called while
// kernels run on other threads.
void simd_select(const std::string& name);

// Applies DELTAFIN_SIMD when it is set (the same errors as simd_select). Called once by main().
void simd_select_from_env();

// "simd: AVX3_DL (available: AVX3_DL AVX3 AVX2 SSE4 SSSE3 SCALAR)": the --version line.
std::string simd_summary();

// Selects `name` for the lifetime of the scope, then restores the previous target (tests).
class SimdScope {
 public:
  explicit SimdScope(const std::string& name) : previous_(simd_current()) { simd_select(name); }
  ~SimdScope() { simd_select(previous_); }
  SimdScope(const SimdScope&) = delete;
  SimdScope& operator=(const SimdScope&) = delete;

 private:
  std::string previous_;
};

}  // namespace deltafin::cpu
