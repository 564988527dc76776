// The checkpoint shards a placement was made from (weights/placement.hpp: "sources"): which
// shards hold placed tensors now, and how they differ from the manifest's. Kept apart from the
// manifest parser, which the placement fuzzer builds alone (tests/fuzz/fuzz_placement.cpp).
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/chrono.h>

#include "util/read_only_file.hpp"
#include "weights/expert_record.hpp"
#include "weights/placement.hpp"
#include "weights/spine_tensors.hpp"

namespace deltafin {
namespace {

// An mtime as UTC "2026-12-03 08:21:04.123456789".
std::string mtime_text(int64_t ns) {
  const std::time_t seconds = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:%Y-%m-%d %H:%M:%S}.{:09d} UTC", tm, ns % 1000000000);
}

}  // namespace

std::vector<PlacementSource> placement_sources(const WeightIndex& index, const ExpertTable& experts,
                                               const std::vector<std::string>& spine_tensors) {
  std::vector<bool> used(static_cast<size_t>(index.shard_count()), false);
  if (!spine_tensors.empty()) {
    const auto by_name = tensors_by_name(index);
    for (const std::string& name : spine_tensors)
      if (auto it = by_name.find(name); it != by_name.end()) used[it->second.shard] = true;
  }
  for (int64_t layer = 0; layer < experts.layers(); ++layer) {
    if (!experts.has(layer)) continue;
    for (int64_t e = 0; e < experts.experts(); ++e)
      for (int part = 0; part < 6; ++part)
        if (const TensorRef& t = record_part_tensor(experts.at(layer, e), part); t.info) used[t.shard] = true;
  }
  std::vector<PlacementSource> sources;
  for (int s = 0; s < index.shard_count(); ++s)
    if (used[s]) {
      const ReadOnlyFile& file = index.shard_file(s);
      sources.push_back({std::filesystem::path(file.path()).filename().string(), file.size(), file.mtime_ns()});
    }
  return sources;
}

std::vector<std::string> source_changes(const PlacementManifest& m, const std::vector<PlacementSource>& now) {
  std::vector<std::string> changes;
  for (const PlacementSource& then : m.sources) {
    auto it = std::find_if(now.begin(), now.end(), [&](const PlacementSource& s) { return s.shard == then.shard; });
    if (it == now.end())
      changes.push_back(fmt::format("shard {} held placed tensors when the placement was made and holds none now", then.shard));
    else if (it->bytes != then.bytes)
      changes.push_back(fmt::format("shard {} changed since the placement was made ({} bytes then, {} now)", then.shard,
                                    then.bytes, it->bytes));
    else if (it->mtime_ns != then.mtime_ns)
      changes.push_back(fmt::format("shard {} was modified after the placement was made (mtime {} then, {} now)",
                                    then.shard, mtime_text(then.mtime_ns), mtime_text(it->mtime_ns)));
  }
  for (const PlacementSource& s : now)
    if (std::none_of(m.sources.begin(), m.sources.end(), [&](const PlacementSource& t) { return t.shard == s.shard; }))
      changes.push_back(fmt::format("shard {} holds placed tensors now but did not when the placement was made", s.shard));
  return changes;
}

}  // namespace deltafin
