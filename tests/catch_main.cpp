// Catch2 main for the deltafin test binary (Catch2 v2, or v3 through catch2_v3/). DELTAFIN_SIMD,
// when set, pins every test to that SIMD target (the per-target tests then run it alone, see
// test::for_each_simd_target).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string_view>

#include "cpu/simd_target.hpp"
#include "util/error.hpp"

int main(int argc, char** argv) {
  try {
    deltafin::cpu::simd_select_from_env();
  } catch (const deltafin::Error& e) {
    std::fprintf(stderr, "deltafin_tests: %s\n", e.what());
    return 1;
  }
  // The SIMD target the tests run on, for the log of a run. On stderr: test discovery
  // (catch_discover_tests) takes every stdout line of a listing as a test name, and Catch2 v3 fails
  // a run whose name matches no test. Not while listing (--list-test-names-only, --list-reporters,
  // --list-tests): discovery lists at every build, and the line there explained nothing.
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::string_view(argv[i]).starts_with("--list");
  if (!listing) std::fprintf(stderr, "%s\n", deltafin::cpu::simd_summary().c_str());
  return Catch::Session().run(argc, argv);
}
