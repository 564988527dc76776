// The one memory budget (issue 16): inspect's plan for the real Kimi K3 at 64 and 128 GB equals
// the hand calculation of docs/memory-budget.md; a budget below the minimum working set is
// refused in one line naming the minimum; and a streamed spine gives bit-identical logits and
// ids to a resident one, on every fixture family and the bundled model, with the spine bytes
// read in the receipt.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include <deltafin/engine.hpp>

#include "test_util.hpp"

using namespace deltafin;

namespace {

struct Pass {
  std::vector<float> logits;
  ModelSummary summary;
  EngineStats stats;
};

// All logits of the golden ids under `memory_gb` (0: the default budget).
Pass all_logits(const std::string& dir, double memory_gb, int64_t chunk) {
  EngineOptions o;
  o.model_dir = dir;
  o.memory_gb = memory_gb;
  o.chunk = chunk;
  o.threads = 2;
  auto engine = Engine::open(o);
  auto session = engine->new_session();
  Pass p;
  p.logits = session->append(test::read_golden(dir).all(), true);
  p.summary = engine->summary();
  p.stats = engine->stats();
  return p;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("inspect prints the memory plan of the real Kimi K3 as docs/memory-budget.md works it out", "[memory-budget]") {
  const std::string dir = test::fixture("k3_real_config");
  const auto at64 = test::run_deltafin("inspect -m " + dir + " --memory-gb 64 --drive-gbps 3");
  INFO(at64.output);
  REQUIRE(at64.exit_code == 0);
  test::check_contains(at64.output, "113.509532 GB spine (from config.json)");
  test::check_contains(at64.output, "budget         64.0000 GB: spine 52.254257 GB resident + 61.255275 GB streamed (window 2.535488 GB), "
                        "experts 0.547215 GB, KV cache and state 2.549662 GB (4096 positions), working 0.256000 GB; "
                        "minimum 5.173509 GB");
  test::check_contains(at64.output, "prefill pass   4096 positions, activations 5.857379 GB (1.430020 MB a position); 1 pass(es) for 4096 positions");
  test::check_contains(at64.output, "streamed       layer 7, layer 11, layer 15");
  test::check_contains(at64.output, "layers 47-92");
  test::check_contains(at64.output, "read/token     87.075076 GB = spine 61.255275 GB + experts 25.819801 GB");
  test::check_contains(at64.output, "hit rate 0.0378%");
  test::check_contains(at64.output, "predicted      0.0345 tok/s from 1 drive(s)");
  const auto four = test::run_deltafin("inspect -m " + dir + " --memory-gb 64 --drive-gbps 7,7,7,7");
  test::check_contains(four.output, "predicted      0.3216 tok/s from 4 drive(s) at 7 + 7 + 7 + 7 = 28 GB/s");
  // A 512-token prompt (docs/prefill.md): one pass of 512 positions.
  const auto at512 = test::run_deltafin("inspect -m " + dir + " --memory-gb 64 --positions 512");
  test::check_contains(at512.output, "prefill pass   512 positions, activations 0.732187 GB");
  test::check_contains(test::run_deltafin("inspect -m " + dir + " --memory-gb 64 --positions 4096 --chunk 64").output,
                       "prefill pass   64 positions (--chunk 64), activations 0.091538 GB (1.430020 MB a position); 64 pass(es)");

  const auto at128 = test::run_deltafin("inspect -m " + dir + " --memory-gb 128 --drive-gbps 3");
  INFO(at128.output);
  REQUIRE(at128.exit_code == 0);
  test::check_contains(at128.output, "budget         128.0000 GB: spine 113.509532 GB resident + 0.000000 GB streamed (window 0.000000 GB), "
                         "experts 5.827428 GB");
  test::check_contains(at128.output, "streamed       nothing");
  test::check_contains(at128.output, "read/token     25.725511 GB = spine 0.000000 GB + experts 25.725511 GB");
  test::check_contains(at128.output, "predicted      0.1166 tok/s");
}

TEST_CASE("a budget below the minimum working set is refused in one line naming the minimum", "[memory-budget][bad-input]") {
  const auto inspect = test::run_deltafin("inspect -m " + test::fixture("k3_real_config") + " --memory-gb 4");
  CHECK(inspect.exit_code == 1);  // after the description of the model, one error line
  test::check_contains(inspect.output, "--memory-gb 4: below the minimum working set of 5.17 GB (2.35 GB of the largest spine unit (head), "
                           "17.5 MB for one expert, 2.55 GB of KV cache and state, 256.0 MB of working memory, "
                           "1.4 MB of activations for a 1-position pass); give at least --memory-gb 5.1736");
  const auto run = test::run_deltafin("run -p hi -n 2 --draft off --memory-gb 0.01");
  CHECK(run.exit_code == 1);
  CHECK(std::count(run.output.begin(), run.output.end(), '\n') == 1);
  test::check_contains(run.output, "--memory-gb 0.01: below the minimum working set of");
  test::check_contains(run.output, "give at least --memory-gb 0.034");
  for (const char* bad : {"--memory-gb -1", "--memory-gb nan"}) {
    const auto r = test::run_deltafin(std::string("run -p hi -n 2 ") + bad);
    CHECK(r.exit_code == 1);
    test::check_contains(r.output, "--memory-gb must be");
  }
  const auto rates = test::run_deltafin("inspect -m " + test::fixture("k3_real_config") + " --memory-gb 64 --drive-gbps 3,x");
  CHECK(rates.exit_code == 1);
  test::check_contains(rates.output, "--drive-gbps: 'x' is not a read rate");
}

TEST_CASE("a streamed spine gives bit-identical logits whatever the budget", "[memory-budget][exactness]") {
  for (const char* name : {"k2_tiny", "dsv3_tiny", "k2_tiny_fp8", "k2_tiny_int4", "k3_tiny", "k3_tiny_mxfp4"}) {
    const std::string dir = test::fixture(name);
    INFO(name);
    const Pass resident = all_logits(dir, 0, 3);
    REQUIRE(resident.summary.spine_units_streamed == 0);
    CHECK(resident.stats.spine_bytes_read == 0);
    const double minimum_gb = resident.summary.minimum_bytes / 1e9;
    // Just above the minimum: (nearly) everything streams through a one- or two-unit window;
    // and a budget between that and the whole spine.
    for (double extra : {0.00002, resident.summary.spine_resident_bytes / 2e9}) {
      const Pass streamed = all_logits(dir, minimum_gb + extra, 3);
      INFO(extra);
      CHECK(streamed.summary.spine_units_streamed > 0);
      CHECK(streamed.stats.spine_bytes_read > 0);
      CHECK(bit_identical(resident.logits, streamed.logits));
      const Pass one_by_one = all_logits(dir, minimum_gb + extra, 1);
      CHECK(bit_identical(resident.logits, one_by_one.logits));
    }
  }
}

TEST_CASE("greedy ids of the bundled model agree between a resident and a streamed spine, and the receipt shows the reads",
          "[memory-budget][exactness]") {
  const std::string base = "run -p 'The streaming spine' -n 12 --temp 0 --ids --draft off --ignore-eos";
  const auto resident = test::run_deltafin(base);
  REQUIRE(resident.exit_code == 0);
  const auto streamed = test::run_deltafin(base + " --memory-gb 0.0345 --stats=full");
  INFO(streamed.output);
  REQUIRE(streamed.exit_code == 0);
  const auto first_line = [](const std::string& text) { return text.substr(0, text.find('\n')); };
  CHECK(first_line(streamed.output) == first_line(resident.output));
  test::check_contains(streamed.output, "budget    0.0345 GB (--memory-gb): spine 0.0000 GB resident + 0.0098 GB streamed (8 of 8 units");
  test::check_contains(streamed.output, "0.0098 GB per decode pass, 0.0098 GB per committed token");
}
