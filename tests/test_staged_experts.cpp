// The expert store's device path (a slot pool the host cannot write: reads staged in host memory
// and uploaded, as on CUDA) gives bit-identical logits to the host path, for both families, at a
// budget that evicts, one larger than the staging slots, and with router lookahead prefetching.
#include <catch2/catch.hpp>

#include <cstring>

#include "io/expert_store.hpp"
#include "model/k2_model.hpp"
#include "model/k3_model.hpp"
#include "staged_backend.hpp"
#include "test_util.hpp"

using namespace deltafin;

namespace {

struct Result {
  std::vector<float> logits;
  ExpertStoreStats stats;
  uint64_t staging_bytes = 0, slot_bytes = 0;
};

// All logits of the golden ids, on `backend`, with an expert budget of `budget` bytes.
template <class Model, class Config>
Result run(const std::string& name, Config (*load)(const std::string&),
           ExpertTable (*table)(const WeightIndex&, const Config&), Backend& backend, uint64_t budget, bool lookahead) {
  const std::string dir = test::fixture(name);
  const Config config = load(dir + "/config.json");
  auto index = WeightIndex::open(dir);
  const ExpertTable experts = table(*index, config);
  auto reader = ExpertReader::from_shards(*index, experts, {});
  ExpertStore store(backend, *index, experts, *reader, budget);
  Model model(*index, config, backend, store);
  if (lookahead) model.set_lookahead(budget / 4);
  const std::vector<int32_t> ids = test::read_golden(dir).all();
  const int64_t n = static_cast<int64_t>(ids.size());
  Result r;
  r.logits.resize(n * config.vocab_size);
  auto state = [&] {
    if constexpr (std::is_same_v<Model, K2Model>) return model.new_cache();
    else return model.new_state();
  }();
  model.forward(state, ids.data(), n / 2, 0, r.logits.data(), true);  // two passes: the second finds some experts cached
  model.forward(state, ids.data() + n / 2, n - n / 2, n / 2, r.logits.data() + n / 2 * config.vocab_size, true);
  r.stats = store.stats();
  r.staging_bytes = store.staging_bytes();
  r.slot_bytes = reader->buffer_bytes(experts.has(0) ? 0 : 1, 0);
  return r;
}

template <class Model, class Config>
void check_staged(const std::string& name, Config (*load)(const std::string&),
                  ExpertTable (*table)(const WeightIndex&, const Config&)) {
  for (uint64_t budget : {uint64_t{3} << 16, uint64_t{64} << 20})
    for (bool lookahead : {false, true}) {
      CAPTURE(name, budget, lookahead);
      auto cpu = make_cpu_backend(2);
      test::StagedBackend staged(2);
      const Result plain = run<Model>(name, load, table, *cpu, budget, lookahead);
      const Result device = run<Model>(name, load, table, staged, budget, lookahead);
      REQUIRE(device.logits.size() == plain.logits.size());
      CHECK(std::memcmp(device.logits.data(), plain.logits.data(), 4 * plain.logits.size()) == 0);
      CHECK(plain.staging_bytes == 0);
      CHECK(device.staging_bytes > 0);
      CHECK(device.staging_bytes <= ExpertStore::kStagingSlots * round_up(device.slot_bytes, 4096));  // a bounded host share
      // every read, uploaded once; a guess cancelled before it was read is not
      CHECK(staged.uploads == device.stats.misses + device.stats.prefetch_reads - device.stats.prefetch_cancelled);
      CHECK(device.stats.peak_cached_bytes <= budget);
      CHECK(device.stats.repeat_reads_in_pass == 0);
    }
}

}  // namespace

TEST_CASE("staged experts (device slot pool): K2 INT4 logits bit-identical to the host pool", "[staged]") {
  check_staged<K2Model>("k2_tiny_int4", load_model_config, k2_expert_table);
}

TEST_CASE("staged experts (device slot pool): K3 MXFP4 logits bit-identical to the host pool", "[staged]") {
  check_staged<K3Model>("k3_tiny_mxfp4", load_k3_config, k3_expert_table);
}
