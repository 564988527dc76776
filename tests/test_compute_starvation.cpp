// Issue 41 item 5: the receipt says when the machine starved the compute thread. --stats-json
// carries the compute thread's CPU time over the decode (overlap.compute_cpu_seconds); --stats
// adds a `cpu` line when that is below half the decode's compute time. Starved here on purpose:
// deltafin shares one core with busy threads of the test.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "cli/compute_starvation.hpp"
#include "test_util.hpp"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace {
namespace fs = std::filesystem;
using deltafin::test::run_deltafin;

double number(simdjson::dom::element e, const char* key) { return static_cast<double>(e[key]); }
const std::string kBundled = deltafin::test::fixtures_dir() + "/../../models/default";
const std::string kRun = "run -m " + kBundled + " -p 'Once upon a time' -n 48 --ignore-eos --temp 0 --draft off --stats";
}  // namespace

TEST_CASE("the compute thread counts as starved below half its compute time on a core", "[receipt][pool]") {
  using deltafin::cli::compute_starved;
  CHECK(compute_starved(0.2, 1.0));
  CHECK(compute_starved(0.49, 1.0));
  CHECK_FALSE(compute_starved(0.5, 1.0));
  CHECK_FALSE(compute_starved(0.95, 1.0));
  CHECK_FALSE(compute_starved(0.0, 0.0));  // no decode
  const double before = deltafin::cli::thread_cpu_seconds();
  volatile double sink = 0;
  for (int i = 0; i < 2000000; ++i) sink = sink + i * 1e-9;
  CHECK(deltafin::cli::thread_cpu_seconds() > before);
}

TEST_CASE("the JSON receipt reports the compute thread's CPU time over the decode", "[receipt][pool]") {
  const fs::path json = fs::temp_directory_path() / ("deltafin-cpu-" + std::to_string(::getpid()) + ".json");
  const auto r = run_deltafin(kRun + " --stats-json " + json.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser parser;
  const simdjson::dom::element stats = parser.load(json.string());
  const double cpu = number(stats["overlap"], "compute_cpu_seconds"), wall = number(stats["overlap"], "decode_seconds");
  CAPTURE(cpu, wall);
  CHECK(cpu > 0);
  CHECK(cpu <= wall + 0.01);  // one thread runs at most the wall time (clock granularity aside)
  fs::remove(json);
}

#if defined(__linux__)
TEST_CASE("the receipt says when the machine starved the compute thread", "[receipt][pool]") {
  // deltafin (inheriting this thread's affinity) and four busy threads share one core: the
  // compute thread gets about a fifth of it.
  cpu_set_t original;
  REQUIRE(sched_getaffinity(0, sizeof original, &original) == 0);
  int core = 0;
  while (!CPU_ISSET(core, &original)) ++core;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(core, &one);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 4; ++i)
    busy.emplace_back([&] {
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const fs::path json = fs::temp_directory_path() / ("deltafin-starved-" + std::to_string(::getpid()) + ".json");
  const auto r = run_deltafin(kRun + " --threads 2 --stats-json " + json.string());
  sched_setaffinity(0, sizeof original, &original);
  stop = true;
  for (auto& t : busy) t.join();

  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("cpu       the compute thread ran ") != std::string::npos);
  CHECK(r.output.find("(starved: the machine is busy)") != std::string::npos);
  simdjson::dom::parser parser;
  const simdjson::dom::element o = parser.load(json.string())["overlap"];
  CHECK(number(o, "compute_cpu_seconds") < 0.5 * number(o, "compute_seconds"));
  fs::remove(json);
}
#endif
