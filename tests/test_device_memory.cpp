// Device memory in the plan (issue 34): a device whose memory the host cannot write (the staged
// backend with a device pool, emulating CUDA) keeps the spine units its budget holds and streams
// the rest through window slots every pass, from host memory where the host budget holds them,
// else from the drives, bit-identical to the resident spine, for both families; the two-pool plan
// shares both budgets; the one helper lands bytes directly or through staging; and the flags are
// checked in one line.
#include <catch2/catch.hpp>

#include <cstring>

#include "decode/memory_plan.hpp"
#include "decode/model_engine.hpp"
#include "io/landing.hpp"
#include "model/k2_model.hpp"
#include "model/k3_model.hpp"
#include "staged_backend.hpp"
#include "test_util.hpp"

using namespace deltafin;

namespace {

constexpr int64_t kPositions = 64;

struct Result {
  std::vector<float> logits;
  std::vector<int32_t> ids;  // greedy continuation
  BudgetPlan plan;
  std::vector<SpineUnit> units;
  uint64_t drive_bytes = 0, uploaded = 0;
  uint64_t streamed_bytes = 0;  // the streamed units' matrices (the plan's units count their vectors too)
};

ModelBytes bytes_of(const ModelConfig& c) { return k2_bytes_from_config(c); }
ModelBytes bytes_of(const K3Config& c) { return k3_bytes_from_config(c); }
int64_t top_k_of(const ModelConfig& c) { return c.num_experts_per_tok; }
int64_t top_k_of(const K3Config& c) { return c.num_experts_per_token; }

// A fixture's plan inputs, at a device budget of `device` bytes.
template <class Config>
BudgetInput plan_input(const Config& config, const ExpertReader& reader, const ExpertTable& experts, uint64_t device) {
  const ModelBytes bytes = bytes_of(config);
  BudgetInput in;
  in.units = spine_units(bytes);
  in.state = planned_state_bytes(bytes, kPositions);
  in.reserve = working_reserve(bytes.spine);
  in.expert_slot = expert_slot_bytes(reader, experts);
  in.all_experts = all_experts_bytes(reader, experts);
  in.routed_per_token = bytes.routed_per_token;
  in.top_k = top_k_of(config);
  in.budget = device;
  in.flag = "--device-memory-gb";
  return in;
}

template <class Config>
struct Fixture {
  Config (*load)(const std::string&);
  ExpertTable (*table)(const WeightIndex&, const Config&);
};

// All logits of the golden ids and of 4 greedy decode passes after them, on `backend`. device 0:
// the whole spine resident; else the two-pool plan of a device of `device` bytes and a host of
// `host` bytes (0: unbounded).
template <class Model, class Config>
Result run(const std::string& name, Fixture<Config> f, Backend& backend, uint64_t device, uint64_t host) {
  const std::string dir = test::fixture(name);
  const Config config = f.load(dir + "/config.json");
  auto index = WeightIndex::open(dir);
  const ExpertTable experts = f.table(*index, config);
  auto reader = ExpertReader::from_shards(*index, experts, {});
  const ModelBytes bytes = bytes_of(config);
  const BudgetInput in = plan_input(config, *reader, experts, device ? device : UINT64_MAX / 4);
  Result r;
  r.plan = plan_budget(in, "test");
  r.units = in.units;
  std::unique_ptr<SpineStream> stream;
  if (device) {
    plan_host(r.plan, in.units, host ? host : UINT64_MAX / 4,
              host_fixed_bytes(bytes.spine, in.expert_slot, ExpertStore::kStagingSlots), "test");
    if (r.plan.spine_streamed) stream = std::make_unique<SpineStream>(backend, *index, *reader, stream_plan(r.plan, bytes));
  }
  ExpertStore store(backend, *index, experts, *reader, std::min<uint64_t>(r.plan.experts, 64 << 20));
  Model model(*index, config, backend, store, stream.get());
  const std::vector<int32_t> ids = test::read_golden(dir).all();
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = config.vocab_size;
  r.logits.resize(n * vocab);
  auto state = [&] {
    if constexpr (std::is_same_v<Model, K2Model>) return model.new_cache();
    else return model.new_state();
  }();
  model.forward(state, ids.data(), n / 2, 0, r.logits.data(), true);
  model.forward(state, ids.data() + n / 2, n - n / 2, n / 2, r.logits.data() + n / 2 * vocab, true);
  std::vector<float> last(r.logits.end() - vocab, r.logits.end());
  for (int64_t i = 0; i < 4; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    r.ids.push_back(next);
    model.forward(state, &next, 1, n + i, last.data(), false);
    r.logits.insert(r.logits.end(), last.begin(), last.end());
  }
  if (stream) stream->drain(), r.drive_bytes = stream->bytes_read(), r.uploaded = stream->bytes_uploaded(),
                r.streamed_bytes = stream->streamed_bytes();
  return r;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class Model, class Config>
void check_device_stream(const std::string& name, Fixture<Config> f) {
  auto cpu = make_cpu_backend(2);
  const Result resident = run<Model>(name, f, *cpu, 0, 0);
  const uint64_t minimum = resident.plan.minimum;
  constexpr int kPasses = 6;  // two prefill passes, four decode passes
  // The device's minimum (nearly every unit streams, through a one- or two-unit window) and a
  // budget that keeps part of the spine; the host unbounded (every streamed unit from host
  // memory), at its minimum (every one from the drives), and between (some of each).
  for (uint64_t device : {minimum + 1000, minimum + resident.plan.spine_resident / 2}) {
    for (int host : {0, 1, 2}) {
      uint64_t host_bytes = 0;
      if (host > 0) {
        test::StagedBackend probe(2, device);
        const Result unbounded = run<Model>(name, f, probe, device, 0);
        uint64_t smallest = UINT64_MAX;  // of the streamed units: room for it alone holds one at least
        for (size_t u = 0; u < unbounded.units.size(); ++u)
          if (!unbounded.plan.resident[u]) smallest = std::min(smallest, unbounded.units[u].bytes);
        host_bytes = unbounded.plan.host_minimum + (host == 2 ? smallest : 0);
      }
      test::StagedBackend staged(2, device);
      const Result streamed = run<Model>(name, f, staged, device, host_bytes);
      CAPTURE(name, device, host_bytes, streamed.plan.window_units, streamed.plan.spine_host, streamed.plan.spine_streamed);
      REQUIRE(streamed.plan.spine_streamed > 0);
      CHECK(bit_identical(resident.logits, streamed.logits));
      CHECK(resident.ids == streamed.ids);
      CHECK(staged.other_uploads > 0);  // the loader's and the stream's copies into device memory
      // Every streamed byte is copied to the device every pass; the drives give those not held.
      CHECK(streamed.uploaded >= kPasses * streamed.streamed_bytes);
      if (host == 0) CHECK(streamed.drive_bytes == 0);
      const bool several = std::count(streamed.plan.resident.begin(), streamed.plan.resident.end(), false) > 1;
      if (host == 1 || (host == 2 && several)) {
        CHECK(streamed.drive_bytes > 0);
        CHECK(streamed.drive_bytes <= kPasses * (streamed.plan.spine_streamed - streamed.plan.spine_host));
      }
      if (host == 2) {
        CHECK(streamed.plan.spine_host > 0);
        CHECK(streamed.drive_bytes < kPasses * streamed.streamed_bytes);
      }
    }
  }
}

}  // namespace

TEST_CASE("device spine streaming is bit-identical: K2 INT4", "[device-memory][exactness]") {
  check_device_stream<K2Model>("k2_tiny_int4", Fixture<ModelConfig>{load_model_config, k2_expert_table});
}

TEST_CASE("device spine streaming is bit-identical: K2 FP8", "[device-memory][exactness]") {
  check_device_stream<K2Model>("k2_tiny_fp8", Fixture<ModelConfig>{load_model_config, k2_expert_table});
}

TEST_CASE("device spine streaming is bit-identical: K3", "[device-memory][exactness]") {
  check_device_stream<K3Model>("k3_tiny", Fixture<K3Config>{load_k3_config, k3_expert_table});
  check_device_stream<K3Model>("k3_tiny_mxfp4", Fixture<K3Config>{load_k3_config, k3_expert_table});
}
