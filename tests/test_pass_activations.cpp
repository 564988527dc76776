// Prefill passes sized by the memory plan (weights/pass_activations.hpp, decode/memory_plan.hpp):
// the activation formula against the scratch's high-water mark of real passes (K2 and K3), the
// plan's choice of the pass (the whole prompt when it fits, a share of the budget otherwise,
// --chunk as a cap), and the receipt's prefill reads over the union of routed experts.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <deltafin/engine.hpp>

#include "decode/memory_plan.hpp"
#include "test_util.hpp"
#include "weights/k3_config.hpp"
#include "weights/model_config.hpp"

using namespace deltafin;

namespace {

const std::string kModel = test::fixtures_dir() + "/../../models/default";

ModelBytes bytes_of(const std::string& dir) {
  const std::string config = dir + "/config.json";
  return dir.find("k3_") != std::string::npos ? k3_bytes_from_config(load_k3_config(config))
                                              : k2_bytes_from_config(load_model_config(config));
}

std::vector<int32_t> prompt_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return ids;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("the planned activations of a pass bound its scratch's high-water mark, within 1.5x", "[pass][memory]") {
  for (const std::string& dir : {kModel, test::fixture("k3_tiny"), test::fixture("k3_tiny_mxfp4"), test::fixture("dsv3_tiny")}) {
    INFO(dir);
    const PassActivations a = bytes_of(dir).activations;
    EngineOptions o;
    o.model_dir = dir;
    o.positions = 300;
    auto engine = Engine::open(o);
    REQUIRE(engine->summary().pass_positions == 300);  // the default budget holds the whole prompt
    for (int64_t n : {1, 7, 64, 300}) {  // ascending: the peak so far is this pass's
      INFO("n = " << n);
      auto session = engine->new_session();
      session->append(prompt_ids(n, engine->summary().vocab_size), false);
      const uint64_t actual = engine->stats().activation_peak_bytes, planned = a.scratch_bytes(n);
      CHECK(planned >= actual);
      // Not wildly above: within 1.5x once the tensors are more than their 256-byte alignment
      // (a tiny fixture's 1-position pass is mostly alignment, which the formula takes at worst).
      if (actual > 64 * 1024) CHECK(planned <= actual * 3 / 2);
      UNSCOPED_INFO(dir << " n " << n << ": planned " << planned << " actual " << actual);
      CHECK(a.bytes(n) >= planned);  // with the backend's temporaries
    }
  }
}

TEST_CASE("the plan gives the pass the whole prompt when it fits, else a share of the budget", "[pass][memory]") {
  const ModelBytes b = bytes_of(test::fixture("k3_real_config"));
  BudgetInput in;
  in.units = spine_units(b);
  in.reserve = working_reserve(b.spine);
  in.state = planned_state_bytes(b, 4096);
  in.expert_slot = 30'000'000;
  in.all_experts = in.expert_slot * 60 * 896;
  in.top_k = 16;
  in.activations = b.activations;
  in.budget = 64'000'000'000;
  in.pass_positions_wanted = 512;
  const BudgetPlan whole = plan_budget(in, "test");
  CHECK(whole.pass_positions == 512);
  CHECK(whole.pass_activations == b.activations.bytes(512));
  // The minimum counts a 1-position pass: at the minimum the pass is one position.
  in.budget = whole.minimum;
  const BudgetPlan least = plan_budget(in, "test");
  CHECK(least.pass_positions == 1);
  in.budget = whole.minimum - 1;
  CHECK_THROWS_WITH(plan_budget(in, "test"), Catch::Contains("activations for a 1-position pass"));
  // Between: the pass takes at most half of what the budget leaves beyond the minimum working
  // set with the experts' one layer's selection, and the rest of the plan counts it.
  uint64_t largest = 0;
  for (const SpineUnit& u : in.units) largest = std::max(largest, u.bytes);
  const uint64_t one = b.activations.bytes(1), keep = in.state + in.reserve + largest + 16 * in.expert_slot;
  in.budget = keep + one + 200 * b.activations.per_position();
  in.pass_positions_wanted = 4096;
  const BudgetPlan part = plan_budget(in, "test");
  const uint64_t share = one + (in.budget - keep - one) / 2;
  CHECK(part.pass_positions > 50);
  CHECK(part.pass_positions < 4096);
  CHECK(part.pass_activations == b.activations.bytes(part.pass_positions));
  CHECK(part.pass_activations <= share);
  CHECK(b.activations.bytes(part.pass_positions + 1) > share);
  CHECK(part.experts >= 16 * in.expert_slot);
  CHECK(part.experts + part.spine_resident + part.window + part.pass_activations + in.state + in.reserve <= in.budget);
}

TEST_CASE("the --chunk flag caps the plan's pass, and a bad --chunk is refused in one line", "[pass][cli]") {
  EngineOptions o;
  o.model_dir = kModel;
  o.positions = 700;
  CHECK(Engine::open(o)->summary().pass_positions == 700);
  o.chunk = 64;
  CHECK(Engine::open(o)->summary().pass_positions == 64);
  o.chunk = 5000;
  CHECK(Engine::open(o)->summary().pass_positions == 700);
  for (const char* command : {"run --tokens 1,2,3 -n 1", "inspect --memory-gb 1"})
    for (const char* bad : {"0", "-3", "x", "1.5"}) {
      INFO(command << " --chunk " << bad);
      const auto r = test::run_deltafin(std::string(command) + " --chunk " + bad);
      CHECK(r.exit_code == 1);
      CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
      test::check_contains(r.output, "--chunk: must be a whole number of positions >= 1");
    }
}

TEST_CASE("logits do not depend on the pass size, bit for bit (K2, K3, the bundled model)", "[pass][exactness]") {
  for (const std::string& dir : {test::fixture("k2_tiny"), test::fixture("k3_tiny"), test::fixture("k3_tiny_mxfp4"), kModel}) {
    INFO(dir);
    const std::vector<int32_t> ids = prompt_ids(90, dir == kModel ? 4096 : 250);
    auto logits = [&](int64_t chunk, bool all) {
      EngineOptions o;
      o.model_dir = dir;
      o.chunk = chunk;
      o.positions = static_cast<int64_t>(ids.size());
      o.threads = 2;
      auto engine = Engine::open(o);
      return engine->new_session()->append(ids, all);
    };
    const auto whole = logits(0, true);  // the plan's pass: the whole prompt
    for (int64_t chunk : {1, 7, 64}) {
      INFO("chunk " << chunk);
      CHECK(bit_identical(whole, logits(chunk, true)));
    }
    CHECK(bit_identical(std::vector<float>(whole.end() - (whole.size() / ids.size()), whole.end()), logits(0, false)));
  }
}

TEST_CASE("a prompt in one pass reads each routed expert once, in passes of 64 it reads them again", "[pass][receipt]") {
  // A 700-token prompt on the bundled model with an expert budget below its experts.
  const std::string prompt = test::join_ids(prompt_ids(700, 4096), ",");
  const std::filesystem::path json =
      std::filesystem::temp_directory_path() / ("deltafin-pass-" + std::to_string(::getpid()) + ".json");
  auto ratio = [&](const std::string& extra) {
    const auto r = test::run_deltafin("run -m " + kModel + " --tokens " + prompt + " -n 1 --ids --cache-gb 0.002 --draft off --stats-json " +
                                      json.string() + extra);
    REQUIRE(r.exit_code == 0);
    std::ifstream in(json);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"read_over_union\": ");
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + 19));
  };
  CHECK(ratio("") == Approx(1.0).margin(1e-9));
  CHECK(ratio(" --chunk 64") > 1.5);
  std::filesystem::remove(json);
}
