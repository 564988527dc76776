// serve_expert_host, open_host_experts and host_reports (see host_engine.hpp).
#include "decode/host_engine.hpp"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "cpu/simd_target.hpp"
#include "decode/model_engine.hpp"
#include "hosts/expert_host.hpp"
#include "hosts/handshake.hpp"
#include "hosts/wire.hpp"
#include "model/family.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"
#include "weights/placement.hpp"

namespace deltafin {
namespace {

// What a host's Hello says of it (everything but the error).
hosts::Hello describe_host(hosts::HostGroup& group, const Backend& backend, const ExpertTable& experts,
                           const std::string& expert_source) {
  hosts::Hello h;
  h.version = hosts::build_version();
  h.host = group.processor_name();
  h.model = model_fingerprint(experts);
  h.placement = expert_source;
  if (expert_source != "shards") {
    const std::string text = read_input_file(expert_source, "--placement");
    h.placement = fmt::format("manifest {:016x}", XXH3_64bits(text.data(), text.size()));
  }
  // The results' bits depend on the backend and the kernels it dispatches, not on its threads.
  h.backend = fmt::format("{} {}", backend.name(), cpu::simd_current());
  return h;
}

// The budget an expert host's cache comes out of: with a device of its own memory (CUDA) the
// device's (--device-memory-gb, else its share of the device's free memory), else the host's.
std::optional<DefaultBudget> expert_host_budget(const EngineOptions& o, const Backend& backend) {
  const std::vector<MemoryPool> pools = backend.memory_pools();
  if (pools.size() < 2 || pools.back().host_visible) return host_budget(o.memory_gb, "--memory-gb");
  return device_budget(o.device_memory_gb, pools.back());
}

}  // namespace

int serve_expert_host(const EngineOptions& o) {
  hosts::HostGroup& group = *hosts::host_group();
  hosts::Hello hello;
  hello.version = hosts::build_version();
  hello.host = group.processor_name();
  std::unique_ptr<WeightIndex> index;
  std::optional<ExpertTable> experts;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ExpertReader> reader;
  std::unique_ptr<ExpertStore> store;
  try {
    index = WeightIndex::open(o.model_dir);
    experts.emplace(load_expert_table(o.model_dir, *index));
    backend = open_backend(o);
    std::string source;
    reader = open_reader(o, *index, *experts, source);
    const uint64_t all = all_experts_bytes(*reader, *experts);
    uint64_t share = all;
    if (o.cache_gb_given) {
      share = static_cast<uint64_t>(o.cache_gb * 1e9);
    } else if (const auto budget = expert_host_budget(o, *backend)) {
      share = expert_host_cache(budget->bytes, all);
    }
    store = std::make_unique<ExpertStore>(*backend, *index, *experts, *reader, share);
    hello = describe_host(group, *backend, *experts, source);
  } catch (const std::exception& e) {
    hello.error = e.what();
  }
  group.send(0, hosts::encode(hello));
  if (!hello.error.empty()) {  // rank 0 reports it and stops everyone
    group.flush(60);
    group.receive(0, 60);
    return 1;
  }
  return hosts::serve_experts(group, *backend, *store);
}

std::unique_ptr<hosts::HostExperts> open_host_experts(hosts::HostGroup& group, const EngineOptions& o, Backend& backend,
                                                      ExpertStore& store, const ExpertTable& experts,
                                                      const std::string& expert_source) {
  if (!(o.host_timeout > 0 && o.host_timeout <= 86400))
    fail("--host-timeout must be a number of seconds in (0, 86400] (got {})", o.host_timeout);
  const hosts::Hello mine = describe_host(group, backend, experts, expert_source);
  const std::vector<hosts::Hello> hellos = hosts::meet_hosts(group, mine, o.host_timeout);
  std::vector<std::string> names;
  for (const hosts::Hello& h : hellos) names.push_back(h.host);
  auto owners = hosts::ExpertOwners::equal_shares(group.size(), experts.layers(), experts.experts());
  if (expert_source != "shards") {  // a placement for several hosts says who holds each expert
    const PlacementManifest manifest = read_placement(expert_source);
    if (manifest.hosts() > 1) {
      std::vector<std::vector<int>> holders(static_cast<size_t>(experts.layers() * experts.experts()));
      for (const PlacedRecord& r : manifest.records)
        holders[static_cast<size_t>(r.layer * experts.experts() + r.expert)] = record_hosts(manifest, r);
      owners = hosts::ExpertOwners(group.size(), experts.layers(), experts.experts(), std::move(holders));
    }
  }
  return std::make_unique<hosts::HostExperts>(backend, store, group, std::move(owners), std::move(names), o.host_timeout,
                                              experts.layers(), experts.experts());
}

std::vector<HostReport> host_reports(const hosts::HostExperts& producer, const EngineStats& own) {
  std::vector<HostReport> out;
  for (const hosts::HostReport& r : producer.reports()) {
    HostReport h;
    h.rank = r.rank, h.name = r.name, h.expert_runs = r.experts;
    h.round_trips = r.round_trips, h.round_trip_seconds = r.round_trip_seconds, h.stall_seconds = r.stall_seconds;
    h.network_seconds = r.network_seconds;
    h.bytes_to = r.bytes_to, h.bytes_from = r.bytes_from;
    if (r.rank == 0) {
      h.expert_bytes_read = own.expert_bytes_read, h.hits = own.expert_hits, h.misses = own.expert_misses;
      h.cache_budget_bytes = own.cache_budget_bytes, h.io_wait_seconds = own.io_wait_seconds;
      for (const DriveReport& d : own.drives) h.drive_busy_seconds = std::max(h.drive_busy_seconds, d.busy_seconds);
    } else {
      const hosts::HostCounters& c = r.counters;
      h.expert_bytes_read = c.expert_bytes_read, h.hits = c.hits, h.misses = c.misses;
      h.cache_budget_bytes = c.cache_budget_bytes, h.busy_seconds = c.busy_seconds, h.io_wait_seconds = c.io_wait_seconds;
      h.drive_busy_seconds = c.drive_busy_seconds;
    }
    out.push_back(h);
  }
  return out;
}

}  // namespace deltafin
