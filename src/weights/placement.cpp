// Placement manifest parsing, printing and the model fingerprint (see placement.hpp).
#include "weights/placement.hpp"

#include <tuple>
#include <simdjson.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <unordered_set>

#include <fmt/ranges.h>

#include "util/error.hpp"
#include "util/input_file.hpp"
#include "util/json_string.hpp"
#include "weights/expert_record.hpp"

namespace deltafin {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t parse_hex64(std::string_view s, const std::string& path, const std::string& where) {
  if (s.size() != 16) fail("{}: {}: checksum must be 16 hex digits", path, where);
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) fail("{}: {}: checksum must be 16 lowercase hex digits", path, where);
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

// An unsigned integer array element below `limit`; `where` names the entry ("record 3").
uint64_t unsigned_at(array a, size_t i, uint64_t limit, const std::string& path, const std::string& where, const char* what) {
  uint64_t v;
  if (a.at(i).get_uint64().get(v) != simdjson::SUCCESS || v >= limit)
    fail("{}: {}: {} must be an integer below {}", path, where, what, limit);
  return v;
}

uint64_t unsigned_at(array a, size_t i, uint64_t limit, const std::string& path, size_t record, const char* what) {
  return unsigned_at(a, i, limit, path, fmt::format("record {}", record), what);
}

constexpr uint64_t kMaxBytes = uint64_t{1} << 40, kMaxOffset = uint64_t{1} << 50;

// A record's holders: 1 to drives [drive, offset] pairs, aligned, each drive once.
std::vector<PlacementHolder> parse_holders(element e, const PlacementManifest& m, const std::string& path,
                                           const std::string& where) {
  array holders;
  if (e.get_array().get(holders) != simdjson::SUCCESS || holders.size() == 0 || holders.size() > m.drives.size())
    fail("{}: {}: holders must list 1 to {} [drive, offset] pairs", path, where, m.drives.size());
  std::vector<PlacementHolder> out;
  for (element h : holders) {
    array pair;
    if (h.get_array().get(pair) != simdjson::SUCCESS || pair.size() != 2)
      fail("{}: {}: each holder must be [drive, offset]", path, where);
    PlacementHolder holder;
    holder.drive = static_cast<int>(unsigned_at(pair, 0, m.drives.size(), path, where, "drive"));
    holder.offset = unsigned_at(pair, 1, kMaxOffset, path, where, "offset");
    if (holder.offset % m.alignment) fail("{}: {}: offset {} is not {}-aligned", path, where, holder.offset, m.alignment);
    for (const PlacementHolder& other : out)
      if (other.drive == holder.drive) fail("{}: {}: drive {} is listed twice", path, where, holder.drive);
    out.push_back(holder);
  }
  return out;
}

// Version 3's "spine": [[tensor, bytes, xxh3, holders], ...], names unique.
std::vector<PlacedSpineRecord> parse_spine(simdjson::dom::object top, const PlacementManifest& m, const std::string& path) {
  array spine;
  if (top["spine"].get_array().get(spine) != simdjson::SUCCESS) fail("{}: field 'spine' must be a list", path);
  std::vector<PlacedSpineRecord> out;
  std::unordered_set<std::string_view> names;
  for (element e : spine) {
    const std::string where = fmt::format("spine record {}", out.size());
    array r;
    std::string_view name, sum;
    if (e.get_array().get(r) != simdjson::SUCCESS || r.size() != 4 || r.at(0).get_string().get(name) != simdjson::SUCCESS ||
        r.at(2).get_string().get(sum) != simdjson::SUCCESS)
      fail("{}: {}: expected [tensor name, bytes, xxh3, holders]", path, where);
    if (name.empty()) fail("{}: {}: the tensor name is empty", path, where);
    if (!names.insert(name).second) fail("{}: {}: tensor '{}' is listed twice", path, where, name);
    PlacedSpineRecord rec;
    rec.tensor = std::string(name);
    rec.payload = unsigned_at(r, 1, kMaxBytes, path, where, "bytes");
    if (rec.payload == 0) fail("{}: {} ('{}'): bytes must be positive", path, where, name);
    rec.xxh3 = parse_hex64(sum, path, where);
    rec.holders = parse_holders(r.at(3), m, path, where);
    out.push_back(std::move(rec));
  }
  return out;
}

// Version 4's "drive_hosts": one host per drive, the hosts numbered 0..H-1 without gaps; empty
// when absent (one host).
std::vector<int> parse_drive_hosts(simdjson::dom::object top, const PlacementManifest& m, const std::string& path) {
  element field;
  if (top["drive_hosts"].get(field) != simdjson::SUCCESS) return {};
  array a;
  if (field.get_array().get(a) != simdjson::SUCCESS || a.size() != m.drives.size())
    fail("{}: field 'drive_hosts' must list one host per drive ({} drives)", path, m.drives.size());
  std::vector<int> hosts;
  for (size_t d = 0; d < a.size(); ++d)
    hosts.push_back(static_cast<int>(unsigned_at(a, d, m.drives.size(), path, fmt::format("drive_hosts[{}]", d), "host")));
  const int count = *std::max_element(hosts.begin(), hosts.end()) + 1;
  for (int h = 0; h < count; ++h)
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end())
      fail("{}: field 'drive_hosts': host {} has no drive (the hosts are numbered 0 to {}, each with a drive)", path, h,
           count - 1);
  return hosts;
}

// `holders` with only those on drives that `renumber` maps (to their new number, -1: dropped).
std::vector<PlacementHolder> holders_on(const std::vector<PlacementHolder>& holders, const std::vector<int>& renumber) {
  std::vector<PlacementHolder> out;
  for (const PlacementHolder& h : holders)
    if (renumber[static_cast<size_t>(h.drive)] >= 0) out.push_back({renumber[static_cast<size_t>(h.drive)], h.offset});
  return out;
}

}  // namespace

int PlacementManifest::hosts() const {
  return drive_hosts.empty() ? 1 : *std::max_element(drive_hosts.begin(), drive_hosts.end()) + 1;
}

std::vector<std::string> PlacementManifest::spine_tensor_names() const {
  if (share_host >= 0) return share_spine_tensors;
  std::vector<std::string> names;
  for (const PlacedSpineRecord& r : spine) names.push_back(r.tensor);
  return names;
}

PlacementManifest host_share(const PlacementManifest& m, int host) {
  if (host < 0 || host >= m.hosts())
    fail("host {} is not in the placement (its drives are on {} host{})", host, m.hosts(), m.hosts() == 1 ? "" : "s");
  PlacementManifest share;
  share.model = m.model;
  share.alignment = m.alignment;
  share.sources = m.sources;
  share.share_host = host;
  share.share_spine_tensors = m.spine_tensor_names();
  std::vector<int> renumber(m.drives.size(), -1);
  for (size_t d = 0; d < m.drives.size(); ++d)
    if (m.drive_host(static_cast<int>(d)) == host) {
      renumber[d] = static_cast<int>(share.drives.size());
      share.drives.push_back(m.drives[d]);
    }
  for (const PlacedRecord& r : m.records)
    if (auto holders = holders_on(r.holders, renumber); !holders.empty())
      share.records.push_back({r.layer, r.expert, r.payload, r.xxh3, std::move(holders)});
  for (const PlacedSpineRecord& r : m.spine)
    if (auto holders = holders_on(r.holders, renumber); !holders.empty())
      share.spine.push_back({r.tensor, r.payload, r.xxh3, std::move(holders)});
  return share;
}

std::vector<int> record_hosts(const PlacementManifest& m, const PlacedRecord& record) {
  std::vector<int> hosts;
  for (const PlacementHolder& h : record.holders)
    if (const int host = m.drive_host(h.drive); std::find(hosts.begin(), hosts.end(), host) == hosts.end())
      hosts.push_back(host);
  return hosts;
}

const PlacedRecord* PlacementManifest::find(int64_t layer, int64_t expert) const {
  auto it = std::lower_bound(records.begin(), records.end(), std::pair{layer, expert},
                             [](const PlacedRecord& r, std::pair<int64_t, int64_t> k) {
                               return std::pair{r.layer, r.expert} < k;
                             });
  return it != records.end() && it->layer == layer && it->expert == expert ? &*it : nullptr;
}

PlacementManifest parse_placement(std::string_view json, const std::string& path) {
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json.data(), json.size()).get(root))
    fail("{}: broken placement manifest JSON ({})", path, simdjson::error_message(err));
  simdjson::dom::object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) fail("{}: top level must be a JSON object", path);
  std::string_view format;
  if (top["format"].get_string().get(format) != simdjson::SUCCESS || format != "deltafin-placement")
    fail("{}: not a deltafin placement manifest (\"format\" must be \"deltafin-placement\")", path);
  int64_t version;
  if (top["version"].get_int64().get(version) != simdjson::SUCCESS || version < PlacementManifest::kOldestReadable ||
      version > PlacementManifest::kVersion)
    fail("{}: unsupported manifest version (this build reads versions {} to {}; run `deltafin place` again)", path,
         PlacementManifest::kOldestReadable, PlacementManifest::kVersion);

  PlacementManifest m;
  std::string_view model;
  if (top["model"].get_string().get(model) != simdjson::SUCCESS) fail("{}: field 'model' must be a string", path);
  m.model = std::string(model);
  uint64_t alignment;
  if (top["alignment"].get_uint64().get(alignment) != simdjson::SUCCESS || alignment < 512 || alignment > (1u << 24) ||
      (alignment & (alignment - 1)))
    fail("{}: field 'alignment' must be a power of two between 512 and 16 MiB", path);
  m.alignment = alignment;

  array sources, drives, records;
  if (top["sources"].get_array().get(sources) != simdjson::SUCCESS || sources.size() == 0 || sources.size() > 100000)
    fail("{}: field 'sources' must be a list of 1 to 100000 [shard, bytes, mtime_ns] entries", path);
  for (element e : sources) {
    array a;
    std::string_view shard;
    PlacementSource source;
    if (e.get_array().get(a) != simdjson::SUCCESS || a.size() != 3 || a.at(0).get_string().get(shard) != simdjson::SUCCESS ||
        a.at(1).get_uint64().get(source.bytes) != simdjson::SUCCESS || a.at(2).get_int64().get(source.mtime_ns) != simdjson::SUCCESS)
      fail("{}: source {}: expected [shard file name, bytes, mtime_ns]", path, m.sources.size());
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string_view::npos ||
        shard.find('\0') != std::string_view::npos)
      fail("{}: source {}: '{}' is not a plain file name", path, m.sources.size(), shard);
    source.shard = std::string(shard);
    for (const PlacementSource& other : m.sources)
      if (other.shard == source.shard) fail("{}: source '{}' is listed twice", path, shard);
    m.sources.push_back(std::move(source));
  }
  if (top["drives"].get_array().get(drives) != simdjson::SUCCESS || drives.size() == 0 || drives.size() > 256)
    fail("{}: field 'drives' must be a list of 1 to 256 data file paths", path);
  for (element d : drives) {
    std::string_view s;
    if (d.get_string().get(s) != simdjson::SUCCESS || s.empty()) fail("{}: every drive must be a non-empty path", path);
    m.drives.emplace_back(s);
  }
  if (top["records"].get_array().get(records) != simdjson::SUCCESS) fail("{}: field 'records' must be a list", path);
  constexpr uint64_t kMaxIndex = 1u << 20;
  size_t i = 0;
  for (element e : records) {
    array r;
    if (e.get_array().get(r) != simdjson::SUCCESS || r.size() != 5)
      fail("{}: record {}: expected [layer, expert, bytes, xxh3, holders]", path, i);
    PlacedRecord rec;
    rec.layer = static_cast<int64_t>(unsigned_at(r, 0, kMaxIndex, path, i, "layer"));
    rec.expert = static_cast<int64_t>(unsigned_at(r, 1, kMaxIndex, path, i, "expert"));
    rec.payload = unsigned_at(r, 2, kMaxBytes, path, i, "bytes");
    if (rec.payload == 0) fail("{}: record {}: bytes must be positive", path, i);
    std::string_view sum;
    if (r.at(3).get_string().get(sum) != simdjson::SUCCESS) fail("{}: record {}: xxh3 must be a string", path, i);
    rec.xxh3 = parse_hex64(sum, path, fmt::format("record {}", i));
    rec.holders = parse_holders(r.at(4), m, path, fmt::format("record {}", i));
    if (!m.records.empty() && std::pair{rec.layer, rec.expert} <= std::pair{m.records.back().layer, m.records.back().expert})
      fail("{}: record {}: records must be sorted by (layer, expert) without repeats", path, i);
    m.records.push_back(std::move(rec));
    ++i;
  }
  if (version >= 3) m.spine = parse_spine(top, m, path);
  if (version >= 4) m.drive_hosts = parse_drive_hosts(top, m, path);
  else if (top["drive_hosts"].error() != simdjson::NO_SUCH_FIELD)
    fail("{}: field 'drive_hosts' needs manifest version 4 (this one says {})", path, version);
  // No two records may share bytes on one drive: (offset, end, spine?, index) per drive, sorted.
  std::vector<std::vector<std::tuple<uint64_t, uint64_t, bool, size_t>>> extents(m.drives.size());
  for (size_t r = 0; r < m.records.size(); ++r)
    for (const PlacementHolder& h : m.records[r].holders) extents[h.drive].emplace_back(h.offset, h.offset + m.records[r].payload, false, r);
  for (size_t r = 0; r < m.spine.size(); ++r)
    for (const PlacementHolder& h : m.spine[r].holders) extents[h.drive].emplace_back(h.offset, h.offset + m.spine[r].payload, true, r);
  const auto name = [](bool spine, size_t r) { return fmt::format("{}record {}", spine ? "spine " : "", r); };
  for (size_t d = 0; d < extents.size(); ++d) {
    std::sort(extents[d].begin(), extents[d].end());
    for (size_t k = 1; k < extents[d].size(); ++k) {
      const auto& [begin, end_a, spine_a, a] = extents[d][k - 1];
      const auto& [offset, end_b, spine_b, b] = extents[d][k];
      if (offset >= end_a) continue;
      if (!spine_a && !spine_b) fail("{}: records {} and {} overlap on drive {} (at offset {})", path, a, b, d, offset);
      fail("{}: {} and {} overlap on drive {} (at offset {})", path, name(spine_a, a), name(spine_b, b), d, offset);
    }
  }
  return m;
}

PlacementManifest read_placement(const std::string& path) {
  return parse_placement(read_input_file(path, "the placement manifest"), path);
}

std::string placement_json(const PlacementManifest& m) {
  std::string out = fmt::format("{{\"format\": \"deltafin-placement\", \"version\": {}, \"model\": \"{}\", \"alignment\": {},\n",
                                m.drive_hosts.empty() ? PlacementManifest::kOneHostVersion : PlacementManifest::kVersion,
                                m.model, m.alignment);
  out += " \"sources\": [";
  for (size_t i = 0; i < m.sources.size(); ++i)
    out += fmt::format("{}[{}, {}, {}]", i ? ", " : "", json_string(m.sources[i].shard), m.sources[i].bytes, m.sources[i].mtime_ns);
  out += "],\n \"drives\": [";
  for (size_t d = 0; d < m.drives.size(); ++d) out += fmt::format("{}{}", d ? ", " : "", json_string(m.drives[d]));
  out += "],\n";
  if (!m.drive_hosts.empty()) out += fmt::format(" \"drive_hosts\": [{}],\n", fmt::join(m.drive_hosts, ", "));
  out += " \"records\": [\n";
  for (size_t i = 0; i < m.records.size(); ++i) {
    const PlacedRecord& r = m.records[i];
    out += fmt::format("  [{}, {}, {}, \"{}\", [", r.layer, r.expert, r.payload, hex64(r.xxh3));
    for (size_t h = 0; h < r.holders.size(); ++h)
      out += fmt::format("{}[{}, {}]", h ? ", " : "", r.holders[h].drive, r.holders[h].offset);
    out += i + 1 < m.records.size() ? "]],\n" : "]]\n";
  }
  out += " ],\n \"spine\": [\n";
  for (size_t i = 0; i < m.spine.size(); ++i) {
    const PlacedSpineRecord& r = m.spine[i];
    out += fmt::format("  [{}, {}, \"{}\", [", json_string(r.tensor), r.payload, hex64(r.xxh3));
    for (size_t h = 0; h < r.holders.size(); ++h)
      out += fmt::format("{}[{}, {}]", h ? ", " : "", r.holders[h].drive, r.holders[h].offset);
    out += i + 1 < m.spine.size() ? "]],\n" : "]]\n";
  }
  out += " ]}\n";
  return out;
}

std::string model_fingerprint(const ExpertTable& experts) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (int64_t layer = 0; layer < experts.layers(); ++layer) {
    if (!experts.has(layer)) continue;
    for (int64_t e = 0; e < experts.experts(); ++e)
      for (int part = 0; part < 6; ++part) {
        const TensorRef& t = record_part_tensor(experts.at(layer, e), part);
        if (!t.info) continue;
        std::string line = fmt::format("{} {} {} [", t.info->name, dtype_name(t.info->dtype), t.info->nbytes);
        for (int64_t d : t.info->shape) line += fmt::format("{},", d);
        line += "]\n";
        XXH3_64bits_update(state, line.data(), line.size());
      }
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return hex64(h);
}

std::string usage_json(const std::string& model, const ExpertUsage& usage) {
  std::string out = fmt::format("{{\"format\": \"deltafin-usage\", \"version\": 1, \"model\": \"{}\", \"counts\": [", model);
  bool first = true;
  for (size_t layer = 0; layer < usage.size(); ++layer) {
    if (usage[layer].empty()) continue;
    out += fmt::format("{}\n  [{}, [{}]]", first ? "" : ",", layer, fmt::join(usage[layer], ", "));
    first = false;
  }
  out += "\n]}\n";
  return out;
}

ExpertUsage read_usage(const std::string& path, const std::string& model, const ExpertTable& experts) {
  const std::string text = read_input_file(path, "the usage statistics");
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(text).get(root)) fail("{}: broken usage JSON ({})", path, simdjson::error_message(err));
  std::string_view format, fingerprint;
  if (root["format"].get_string().get(format) != simdjson::SUCCESS || format != "deltafin-usage")
    fail("{}: not deltafin usage statistics (\"format\" must be \"deltafin-usage\")", path);
  if (root["model"].get_string().get(fingerprint) != simdjson::SUCCESS || fingerprint != model)
    fail("{}: usage recorded for a different model (fingerprint {}, this model {})", path, fingerprint, model);
  ExpertUsage usage(experts.layers());
  for (int64_t layer = 0; layer < experts.layers(); ++layer)
    if (experts.has(layer)) usage[layer].assign(experts.experts(), 0);
  array counts;
  if (root["counts"].get_array().get(counts) != simdjson::SUCCESS) fail("{}: field 'counts' must be a list", path);
  for (element row : counts) {
    array pair, values;
    uint64_t layer;
    if (row.get_array().get(pair) != simdjson::SUCCESS || pair.size() != 2 || pair.at(0).get_uint64().get(layer) ||
        layer >= usage.size() || usage[layer].empty() || pair.at(1).get_array().get(values) ||
        values.size() != usage[layer].size())
      fail("{}: each count row must be [MoE layer, [one count per expert]] for this model", path);
    size_t e = 0;
    for (element v : values)
      if (v.get_uint64().get(usage[layer][e++])) fail("{}: layer {}: counts must be non-negative integers", path, layer);
  }
  return usage;
}

std::string default_placement_path(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / "deltafin-placement.json").string();
}

}  // namespace deltafin
