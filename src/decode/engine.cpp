// The engine's family-independent parts (decode/model_engine.hpp): the memory plan and the
// expert budget, the expert reader's source, the backend, and Engine::open, which checks the
// options and opens the engine of the config's family.
#include <deltafin/engine.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "decode/model_engine.hpp"
#include "hosts/host_group.hpp"
#include "hosts/local_device.hpp"
#include "model/family.hpp"
#include "util/aligned_buffer.hpp"
#include "util/error.hpp"
#include "util/human_bytes.hpp"
#include "util/memory_available.hpp"
#include "weights/placement.hpp"

namespace deltafin {

uint64_t expert_slot_bytes(const ExpertReader& reader, const ExpertTable& experts) {
  uint64_t largest = 0;
  for (int64_t layer = 0; layer < experts.layers(); ++layer)
    if (experts.has(layer))
      for (int64_t e = 0; e < experts.experts(); ++e) largest = std::max(largest, reader.buffer_bytes(layer, e));
  return round_up(largest, AlignedBuffer::kAlignment);
}

RoutingTraceHeader routing_trace_header(const std::string& model, int64_t top_k, const ExpertReader& reader,
                                        const ExpertTable& experts) {
  RoutingTraceHeader h;
  h.model = model;
  h.layers = experts.layers();
  h.experts = experts.experts();
  h.top_k = top_k;
  h.slot_bytes = expert_slot_bytes(reader, experts);
  for (int64_t layer = 0; layer < experts.layers(); ++layer) {
    if (!experts.has(layer)) continue;
    h.moe_layers.push_back(layer);
    for (int64_t e = 0; e < experts.experts(); ++e) {
      const uint64_t payload = reader.layout(layer, e).payload;
      if (h.record_bytes != 0 && payload != h.record_bytes)
        fail("--record-routing: expert {}/{} is {} bytes where the others are {}; a routing trace needs experts of one size",
             layer, e, payload, h.record_bytes);
      h.record_bytes = payload;
    }
  }
  if (h.moe_layers.empty()) fail("--record-routing: the model has no routed experts to trace");
  return h;
}

// Every expert in a slot of the pool at once.
uint64_t all_experts_bytes(const ExpertReader& reader, const ExpertTable& experts) {
  uint64_t records = 0;
  for (int64_t layer = 0; layer < experts.layers(); ++layer) records += experts.has(layer) ? experts.experts() : 0;
  return records * expert_slot_bytes(reader, experts);
}

// The host's budget: --memory-gb (at most what the machine can give), else the machine's
// default; nullopt where neither is known (no /proc).
std::optional<DefaultBudget> host_budget(double memory_gb, const char* flag) {
  if (memory_gb <= 0) return default_memory_budget();
  const DefaultBudget budget{static_cast<uint64_t>(memory_gb * 1e9), flag};
  // A budget past what the machine and its cgroups can give ends in the OOM killer, not here.
  if (const auto avail = memory_available(); avail && budget.bytes > avail->bytes)
    fail("{} {}: more than this machine can give this process ({} available: {}); give at most {} {}", flag, memory_gb,
         human_bytes(avail->bytes), avail->source, flag, std::floor(avail->bytes / 1e7) / 1e2);
  return budget;
}

DefaultBudget device_budget(double device_memory_gb, const MemoryPool& device) {
  if (device_memory_gb <= 0) return default_device_budget(device.free, device.size, device.sharers);
  const DefaultBudget budget{static_cast<uint64_t>(device_memory_gb * 1e9), "--device-memory-gb"};
  if (device.free && budget.bytes > device.free)
    fail("--device-memory-gb {}: more than the device has free ({} of {}); give at most --device-memory-gb {}",
         device_memory_gb, human_bytes(device.free), human_bytes(device.size), std::floor(device.free / 1e7) / 1e2);
  return budget;
}

// The memory plan of one engine under EngineOptions (memory_plan.hpp). One pool: the budget is
// --memory-gb (or --device-memory-gb, the same pool), else the machine's default; without
// either (no /proc) nothing is checked, the spine is resident and the expert share is --cache-gb
// or 4 GB. Two pools: the device's budget is --device-memory-gb, else its free memory less a
// margin; the host's is --memory-gb as above.
BudgetPlan plan_memory(const EngineOptions& o, const MemoryInputs& m, const std::vector<MemoryPool>& pools,
                       std::string& source, std::string& device_source) {
  const bool two_pools = pools.size() > 1 && !pools.back().host_visible;
  BudgetInput in;
  in.units = spine_units(m.bytes);
  in.state = m.state;
  in.reserve = working_reserve(m.bytes.spine);
  in.others = o.reserved_bytes;
  in.expert_slot = m.expert_slot;
  in.all_experts = m.all_experts;
  in.routed_per_token = m.bytes.routed_per_token;
  in.top_k = m.top_k;
  in.activations = m.bytes.activations;
  in.pass_positions_wanted = m.pass_wanted;
  if (o.cache_gb > 0 || o.cache_gb_given) in.expert_cap = static_cast<uint64_t>(o.cache_gb * 1e9);
  in.cap_fixed = o.cache_gb_given;
  if (!two_pools) {
    if (o.device_memory_gb > 0 && o.memory_gb > 0 && o.device_memory_gb != o.memory_gb)
      fail("--device-memory-gb {}: this backend has one memory pool (the host's), so the device's budget is --memory-gb {}; "
           "give one of them",
           o.device_memory_gb, o.memory_gb);
    const double gb = o.memory_gb > 0 ? o.memory_gb : o.device_memory_gb;
    const char* flag = o.memory_gb > 0 || o.device_memory_gb == 0 ? "--memory-gb" : "--device-memory-gb";
    const std::optional<DefaultBudget> budget = host_budget(gb, flag);
    if (!budget) {
      if (!in.expert_cap) in.expert_cap = 4'000'000'000;
      in.budget = UINT64_MAX / 4;
      source = "unchecked (the machine's free memory is unknown)";
    } else {
      in.budget = budget->bytes;
      source = budget->source;
    }
    in.flag = flag;
    const std::string what = gb > 0 ? fmt::format("{}: {} {}", o.model_dir, flag, gb)
                                    : fmt::format("{}: the default memory budget of {} ({})", o.model_dir,
                                                  human_bytes(in.budget), source);
    return plan_budget(in, what);
  }
  const MemoryPool& device = pools.back();
  const DefaultBudget dev = device_budget(o.device_memory_gb, device);
  in.budget = dev.bytes;
  in.flag = "--device-memory-gb";
  device_source = dev.source;
  BudgetPlan plan = plan_budget(in, o.device_memory_gb > 0 ? fmt::format("{}: --device-memory-gb {}", o.model_dir, o.device_memory_gb)
                                                           : fmt::format("{}: the default device budget of {} ({})", o.model_dir,
                                                                         human_bytes(dev.bytes), dev.source));
  const std::optional<DefaultBudget> host = host_budget(o.memory_gb, "--memory-gb");
  source = host ? host->source : "unchecked (the machine's free memory is unknown)";
  const uint64_t host_bytes = host ? host->bytes : UINT64_MAX / 4;
  plan_host(plan, in.units, host_bytes, host_fixed_bytes(m.bytes.spine, m.expert_slot, ExpertStore::kStagingSlots),
            o.memory_gb > 0 ? fmt::format("{}: --memory-gb {}", o.model_dir, o.memory_gb)
                            : fmt::format("{}: the default memory budget of {} ({})", o.model_dir, human_bytes(host_bytes), source));
  return plan;
}

// Warns about checkpoint tensors the config does not describe (a config with 5 layers for a
// checkpoint of 6), as transformers does. Not counted: multi-token-prediction layers
// [layers, layers + nextn), and tensors outside the language model (a multimodal wrapper's
// vision tower when the language model sits under a prefix).
void warn_unused_tensors(const WeightIndex& index, int64_t layers, int64_t nextn) {
  std::vector<std::string> unused;
  for (const std::string& name : index.unused_tensors()) {
    if (name.rfind(index.prefix(), 0) != 0) continue;
    const std::string_view rest = std::string_view(name).substr(index.prefix().size());
    int64_t layer = -1;
    if (rest.rfind("model.layers.", 0) == 0) {
      const std::string digits(rest.substr(13, rest.find('.', 13) - 13));
      if (!digits.empty() && digits.size() < 10 && std::all_of(digits.begin(), digits.end(), ::isdigit)) layer = std::stoll(digits);
    }
    if (layer >= layers && layer < layers + nextn) continue;
    unused.push_back(name);
  }
  if (unused.empty()) return;
  spdlog::warn("{}: {} tensor(s) of the checkpoint are not used by its config.json (first: '{}'{}); does the config "
               "describe this checkpoint?",
               index.dir(), unused.size(), unused.front(), unused.size() > 1 ? fmt::format(", last: '{}'", unused.back()) : "");
}

// Expert records come from the placement when there is one (given, or next to the model), else
// from the original shards. Under mpirun, a placement for several hosts gives each host its share.
std::unique_ptr<ExpertReader> open_reader(const EngineOptions& o, const WeightIndex& index, const ExpertTable& experts,
                                          std::string& source) {
  ReaderOptions r;
  r.bypass = o.bypass;
  r.depth = o.io_depth;
  r.piece_bytes = round_up(static_cast<uint64_t>(o.io_piece_mb * (1 << 20)), 4096);
  std::string path = o.placement;
  if (path.empty() && std::filesystem::exists(default_placement_path(o.model_dir))) path = default_placement_path(o.model_dir);
  if (path.empty() || path == "none") {
    source = "shards";
    return ExpertReader::from_shards(index, experts, r);
  }
  source = path;
  PlacementManifest manifest = read_placement(path);
  // A placement for several hosts under mpirun: this host reads its own drives' share.
  if (const hosts::HostGroup* group = o.across_hosts ? hosts::host_group() : nullptr; group && manifest.hosts() > 1) {
    if (group->size() != manifest.hosts())
      fail("{}: a placement for {} hosts, but mpirun started {} ranks (one per host: mpirun -n {})", path, manifest.hosts(),
           group->size(), manifest.hosts());
    manifest = host_share(manifest, group->rank());
  }
  return ExpertReader::from_placement(manifest, path, index, experts, r);
}

std::unique_ptr<Backend> open_backend(const EngineOptions& o) {
  if (o.backend == "cuda" || (o.backend == "auto" && cuda_device_present())) {
    const hosts::LocalDevice gpu = hosts::this_rank_device(cuda_device_count());  // one rank per GPU under mpirun
    return make_cuda_backend(gpu.device, gpu.sharers);
  }
  if (o.backend == "metal" || (o.backend == "auto" && metal_device_present())) return make_metal_backend();
  return make_cpu_backend(o.threads);
}



std::unique_ptr<Engine> Engine::open(const EngineOptions& options) {
  if (!(options.cache_gb >= 0 && options.cache_gb <= 1e9))  // also NaN and inf
    fail("--cache-gb must be a number of GB >= 0 (got {})", options.cache_gb);
  if (!(options.memory_gb >= 0 && options.memory_gb <= 1e9))
    fail("--memory-gb must be a number of GB > 0 (got {})", options.memory_gb);
  if (!(options.device_memory_gb >= 0 && options.device_memory_gb <= 1e9))
    fail("--device-memory-gb must be a number of GB > 0 (got {})", options.device_memory_gb);
  if (options.threads < 0) fail("--threads must be >= 0 (0: one per CPU this process may use; got {})", options.threads);
  // Past a few threads per core they only take turns (and each holds a stack): a typo, not a plan.
  const int most_threads = 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (options.threads > most_threads)
    fail("--threads {}: more than 4 per hardware thread (this machine has {}); give at most --threads {}", options.threads,
         most_threads / 4, most_threads);
  if (options.backend != "cpu" && options.backend != "cuda" && options.backend != "metal" && options.backend != "auto")
    fail("--backend must be cpu, cuda, metal or auto (got '{}')", options.backend);
  if (options.chunk < 0) fail("--chunk must be positive (got {})", options.chunk);
  if (options.positions < 0) fail("the planned positions must be >= 0 (got {})", options.positions);
  if (options.io_depth < 1 || options.io_depth > 256) fail("--io-depth must be 1..256 (got {})", options.io_depth);
  if (!(options.io_piece_mb >= 0.004 && options.io_piece_mb <= 1024))
    fail("--io-piece-mb must be between 0.004 and 1024 (got {})", options.io_piece_mb);
  const std::string config = (std::filesystem::path(options.model_dir) / "config.json").string();
  return open_family_engine(family_of(config), options);
}

}  // namespace deltafin
