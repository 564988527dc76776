// Device memory in the plan (issue 34): a device whose memory the host cannot write (the staged
// backend with a device pool, emulating CUDA) keeps the spine units its budget holds and streams
// the rest through window slots every pass, from host memory where the host budget holds them,
// else from the drives, bit-identical to the resident spine, for both families; the two-pool plan
// shares both budgets; the one helper lands bytes directly or through staging; and the flags are
// checked in one line. On a CUDA machine ([cuda]) the same through VRAM, against CUDA's resident
// spine and the CPU's ids.
#include <catch2/catch.hpp>

#include <cstring>

#include <deltafin/engine.hpp>

#include "decode/memory_plan.hpp"
#include "decode/model_engine.hpp"
#include "hosts/local_device.hpp"
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

TEST_CASE("inspect --device-memory-gb: the real K3 on an H100 and an H200, as in docs/cuda.md", "[device-memory]") {
  const std::string dir = test::fixture("k3_real_config");
  const auto h100 = test::run_deltafin("inspect -m " + dir + " --device-memory-gb 82 --memory-gb 64");
  INFO(h100.output);
  REQUIRE(h100.exit_code == 0);
  test::check_contains(h100.output, "device         82.0000 GB: spine 70.426083 GB resident + 43.083449 GB streamed (window 2.535488 GB), "
                        "experts 0.375389 GB");
  test::check_contains(h100.output, "host           64.0000 GB: streamed spine 43.083449 GB held + 0.000000 GB from the drives");
  test::check_contains(h100.output, "resident       embedding, layers 0-2, layers 4-6,");
  test::check_contains(h100.output, "layers 64-66, head");
  test::check_contains(h100.output, "from host      layer 3, layer 7,");
  test::check_contains(h100.output, "layer 63, layers 67-92");
  test::check_contains(h100.output, "from drives    nothing");
  test::check_contains(h100.output, "prefill pass   4096 positions, activations 5.857379 GB");
  test::check_contains(h100.output, "to device      68.906318 GB a token, host to device = streamed spine 43.083449 GB + expert reads 25.822869 GB");
  const auto small_host = test::run_deltafin("inspect -m " + dir + " --device-memory-gb 82 --memory-gb 16");
  test::check_contains(small_host.output, "host           16.0000 GB: streamed spine 12.254033 GB held + 30.829416 GB from the drives "
                              "(pinned window 2.535488 GB)");
  test::check_contains(small_host.output, "read/token     56.652286 GB = spine 30.829416 GB + experts 25.822869 GB");

  const auto h200 = test::run_deltafin("inspect -m " + dir + " --device-memory-gb 141 --memory-gb 64");
  INFO(h200.output);
  REQUIRE(h200.exit_code == 0);
  test::check_contains(h200.output, "device         141.0000 GB: spine 113.509532 GB resident + 0.000000 GB streamed (window 0.000000 GB), "
                        "experts 18.827428 GB");
  test::check_contains(h200.output, "from host      nothing");
  test::check_contains(h200.output, "to device      25.493369 GB a token");
}

TEST_CASE("bad --device-memory-gb values and a second budget for one pool are refused in one line", "[device-memory][bad-input]") {
  for (const char* bad : {"--device-memory-gb -1", "--device-memory-gb nan", "--device-memory-gb 1e12"}) {
    for (const std::string cmd : {"run -p hi -n 2 --draft off ", "inspect "}) {
      const auto r = test::run_deltafin(cmd + bad);
      INFO(cmd + bad);
      INFO(r.output);
      CHECK(r.exit_code == 1);
      test::check_contains(r.output, "--device-memory-gb must be a number of GB > 0");
    }
  }
  const auto both = test::run_deltafin("run -p hi -n 2 --draft off --memory-gb 1 --device-memory-gb 2");
  CHECK(both.exit_code == 1);
  CHECK(std::count(both.output.begin(), both.output.end(), '\n') == 1);
  test::check_contains(both.output, "--device-memory-gb 2: this backend has one memory pool (the host's), so the device's budget is --memory-gb 1");
  const auto below = test::run_deltafin("inspect -m " + test::fixture("k3_real_config") + " --device-memory-gb 4");
  CHECK(below.exit_code == 1);
  test::check_contains(below.output, "--device-memory-gb 4: below the minimum working set of 5.17 GB");
  test::check_contains(below.output, "give at least --device-memory-gb 5.1736");
  const auto host = test::run_deltafin("inspect -m " + test::fixture("k3_real_config") + " --device-memory-gb 82 --memory-gb 2");
  CHECK(host.exit_code == 1);
  test::check_contains(host.output, "--memory-gb 2: below the host's share of 3.35 GB");
}

TEST_CASE("on the CPU --device-memory-gb is the one budget: a streamed spine gives the resident run's ids", "[device-memory][exactness]") {
  const std::string base = "run -p 'The streaming spine' -n 12 --temp 0 --ids --draft off --ignore-eos";
  const auto resident = test::run_deltafin(base);
  REQUIRE(resident.exit_code == 0);
  const auto streamed = test::run_deltafin(base + " --device-memory-gb 0.0345 --stats=full");
  INFO(streamed.output);
  REQUIRE(streamed.exit_code == 0);
  const auto first_line = [](const std::string& text) { return text.substr(0, text.find('\n')); };
  CHECK(first_line(streamed.output) == first_line(resident.output));
  test::check_contains(streamed.output, "budget    0.0345 GB (--device-memory-gb): spine 0.0000 GB resident + 0.0098 GB streamed");
}

TEST_CASE("mpirun ranks take a machine's GPUs in turn, and ranks sharing one split its default budget", "[device-memory][hosts]") {
  // 2 ranks on 2 GPUs: one each; 4 on 2: two each; 3 on 2: device 0 has two; 2 on 1: both on 0.
  CHECK(hosts::local_device(0, 2, 2).device == 0);
  CHECK(hosts::local_device(1, 2, 2).device == 1);
  CHECK(hosts::local_device(1, 2, 2).sharers == 1);
  CHECK(hosts::local_device(3, 4, 2).device == 1);
  CHECK(hosts::local_device(3, 4, 2).sharers == 2);
  CHECK(hosts::local_device(2, 3, 2).sharers == 2);
  CHECK(hosts::local_device(1, 3, 2).sharers == 1);
  CHECK(hosts::local_device(1, 2, 1).device == 0);
  CHECK(hosts::local_device(1, 2, 1).sharers == 2);
  CHECK(hosts::local_device(0, 1, 0).sharers == 1);
  CHECK(hosts::this_rank_device(4).device == 0);  // no mpirun here: device 0 alone
  // 80 GB of which 79 GB free: less 1.6 GB (2%), then halved for two ranks on the card.
  const DefaultBudget alone = default_device_budget(79'000'000'000, 80'000'000'000);
  const DefaultBudget shared = default_device_budget(79'000'000'000, 80'000'000'000, 2);
  CHECK(alone.bytes == 77'400'000'000);
  CHECK(shared.bytes == 38'700'000'000);
  test::check_contains(shared.source, "split between the 2 ranks of this run on the device");
}

TEST_CASE("the landing helper writes in place where the host can, else through staging and one copy", "[device-memory]") {
  auto cpu = make_cpu_backend(1);
  test::StagedBackend staged(1, 1 << 20);
  const std::vector<std::byte> bytes(100, std::byte{7});
  for (Backend* b : {cpu.get(), static_cast<Backend*>(&staged)}) {
    auto dst = b->allocate(4096);
    auto staging = b->allocate_host(4096);
    const Landing landing(*dst, 64, bytes.size(), staging.get(), 128);
    CHECK(landing.staged() == needs_staging(*dst));
    CHECK(landing.host() == (dst->host() ? dst->host() + 64 : staging->host() + 128));
    std::memcpy(landing.host(), bytes.data(), bytes.size());
    landing.finish(*b);
    std::vector<float> back(1024);
    b->download(Tensor::of(*dst, 1, 1024), back.data());
    CHECK(std::memcmp(reinterpret_cast<std::byte*>(back.data()) + 64, bytes.data(), bytes.size()) == 0);
  }
  CHECK(staged.other_uploads == 1);
  auto device = staged.allocate(4096);
  CHECK_THROWS_WITH(Landing(*device, 0, 100), Catch::Contains("no host staging memory"));
  CHECK(cpu->memory_pools().size() == 1);
  CHECK(cpu->memory_pools().front().host_visible);
  CHECK(staged.memory_pools().back().size == 1 << 20);
  CHECK_FALSE(staged.memory_pools().back().host_visible);
}

namespace {

struct EngineRun {
  std::vector<float> logits;  // all logits of the golden ids
  std::vector<int32_t> ids;   // 6 greedy ids after them
  ModelSummary summary;
  EngineStats stats;
};

EngineRun engine_run(const std::string& dir, const std::string& backend, double device_gb, double host_gb) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend = backend;
  o.device_memory_gb = device_gb;
  o.memory_gb = host_gb;
  o.threads = 2;
  o.chunk = 3;
  auto engine = Engine::open(o);
  auto session = engine->new_session();
  EngineRun r;
  r.logits = session->append(test::read_golden(dir).all(), true);
  const int64_t vocab = engine->summary().vocab_size;
  std::vector<float> last(r.logits.end() - vocab, r.logits.end());
  for (int i = 0; i < 6; ++i) {
    r.ids.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    last = session->append(std::span(&r.ids.back(), 1), false);
  }
  r.summary = engine->summary();
  r.stats = engine->stats();
  return r;
}

}  // namespace

// On the GPU machine (scripts/gpu-test.sh, step cuda-tests): the CUDA backend streams the spine
// through VRAM window slots at a device budget just above its minimum, from pinned host memory
// and, at the host's minimum, from the drives: logits bit-identical to CUDA's resident spine,
// greedy ids the CPU's.
TEST_CASE("cuda: a device budget below the spine streams it, bit-identical to resident", "[cuda]") {
  if (!cuda_device_present()) {
    WARN("no CUDA device on this machine: skipped");
    return;
  }
  for (const char* name : {"k2_tiny_fp8", "k2_tiny_int4", "k3_tiny", "k3_tiny_mxfp4"}) {
    const std::string dir = test::fixture(name);
    CAPTURE(name);
    const EngineRun cpu = engine_run(dir, "cpu", 0, 0);
    const EngineRun resident = engine_run(dir, "cuda", 0, 0);
    REQUIRE(resident.summary.device_memory_budget > 0);  // two pools
    REQUIRE(resident.summary.spine_units_streamed == 0);
    CHECK(resident.ids == cpu.ids);
    const double device_gb = resident.summary.minimum_bytes / 1e9 + 1e-6;
    const EngineRun from_host = engine_run(dir, "cuda", device_gb, 0);
    CHECK(from_host.summary.spine_units_streamed > 0);
    CHECK(from_host.stats.spine_bytes_read == 0);
    CHECK(bit_identical(resident.logits, from_host.logits));
    CHECK(from_host.ids == cpu.ids);
    const EngineRun from_drives = engine_run(dir, "cuda", device_gb, from_host.summary.host_minimum_bytes / 1e9 + 1e-6);
    CHECK(from_drives.stats.spine_bytes_read > 0);
    CHECK(bit_identical(resident.logits, from_drives.logits));
    CHECK(from_drives.ids == cpu.ids);
  }
}
