// Catch2 main for the deltafin test binary. DELTAFIN_SIMD, when set, pins every test to that SIMD
// target (the per-target tests then run it alone, see test::for_each_simd_target).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "cpu/simd_target.hpp"
#include "util/error.hpp"

int main(int argc, char** argv) {
  try {
    deltafin::cpu::simd_select_from_env();
  } catch (const deltafin::Error& e) {
    std::fprintf(stderr, "deltafin_tests: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", deltafin::cpu::simd_summary().c_str());
  return Catch::Session().run(argc, argv);
}
