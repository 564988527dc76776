// Issue 35, item 2: placement per host. Manifest version 4's "drive_hosts" (parsed, checked,
// printed; versions 2 and 3 still read as one host), host_share() and record_hosts(), `place
// --hosts N` (equal shares, --host-weights, --replicate-hosts, --replicate within each host, the
// spine on host 0), and readers of each host's share giving the shards' bytes for the experts on
// that host and one clear error for the others.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/expert_reader.hpp"
#include "io/placer.hpp"
#include "model/family.hpp"
#include "placement_bench.hpp"
#include "test_util.hpp"
#include "util/aligned_buffer.hpp"
#include "util/error.hpp"
#include "weights/placement.hpp"
#include "weights/spine_tensors.hpp"

namespace fs = std::filesystem;
using namespace deltafin;
using test::Bench;
using test::greedy;
using test::run_deltafin;
using test::run_stdout;

namespace {

// A version 4 manifest: drives /a../d, hosts 0, 0, 1, 1; expert 1/0 on host 0, 1/1 on host 1 then
// 0, 1/2 on both drives of host 1; spine tensor 's0' on host 0, 's1' on host 1.
const std::string kTwoHosts = R"({"format": "deltafin-placement", "version": 4, "model": "m", "alignment": 4096,
  "sources": [["s", 1, 2]], "drives": ["/a", "/b", "/c", "/d"], "drive_hosts": [0, 0, 1, 1],
  "records": [[1, 0, 100, "00000000000000aa", [[0, 0]]],
              [1, 1, 100, "00000000000000bb", [[3, 0], [1, 0]]],
              [1, 2, 100, "00000000000000cc", [[2, 0], [3, 4096]]]],
  "spine": [["s0", 10, "00000000000000dd", [[0, 4096]]], ["s1", 10, "00000000000000ee", [[2, 4096]]]]})";

std::string head_v4(const std::string& drive_hosts) {
  return R"({"format": "deltafin-placement", "version": 4, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]],
    "drives": ["/a", "/b", "/c"], )" + drive_hosts + R"("records": [], "spine": []})";
}

// The drives of host h in a placement made with `hosts` equal groups of `per_host` drives.
bool on_host(const PlacementHolder& holder, int host, int per_host) { return holder.drive / per_host == host; }

// Reads (layer, expert) through `reader` into a zeroed buffer; returns its payload, or "" with the error.
std::string read_record(ExpertReader& reader, int64_t layer, int64_t expert, std::string* error) {
  AlignedBuffer buffer(reader.buffer_bytes(layer, expert));
  std::memset(buffer.data(), 0, buffer.size());
  std::promise<std::exception_ptr> done;
  reader.read(layer, expert, buffer.data(), true, [&](std::exception_ptr e) { done.set_value(std::move(e)); });
  if (const std::exception_ptr e = done.get_future().get()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      *error = x.what();
    }
    return "";
  }
  return std::string(reinterpret_cast<const char*>(buffer.data()), reader.layout(layer, expert).payload);
}

// Expert records per (layer, host), counting each record's primary holder.
std::map<std::pair<int64_t, int>, int> primaries(const PlacementManifest& m) {
  std::map<std::pair<int64_t, int>, int> count;
  for (const PlacedRecord& r : m.records) ++count[{r.layer, m.drive_host(r.holders.front().drive)}];
  return count;
}

}  // namespace

TEST_CASE("placement manifest version 4: drive_hosts is parsed, checked and printed, and version 3 reads as one host",
          "[placement][hosts][bad-input]") {
  const PlacementManifest m = parse_placement(kTwoHosts, "m.json");
  CHECK(m.hosts() == 2);
  CHECK(m.drive_hosts == std::vector<int>{0, 0, 1, 1});
  CHECK(m.drive_host(2) == 1);
  const std::string printed = placement_json(m);
  CHECK(printed.find("\"version\": 4") != std::string::npos);
  const PlacementManifest again = parse_placement(printed, "again.json");
  CHECK(again.drive_hosts == m.drive_hosts);
  CHECK(placement_json(again) == printed);

  // Without drive_hosts: one host, written as version 3 as before.
  const PlacementManifest one = parse_placement(head_v4(""), "m.json");
  CHECK(one.hosts() == 1);
  CHECK(one.drive_hosts.empty());
  CHECK(placement_json(one).find("\"version\": 3") != std::string::npos);
  CHECK(placement_json(one).find("drive_hosts") == std::string::npos);
  const std::string v3 = R"({"format": "deltafin-placement", "version": 3, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]],
    "drives": ["/a", "/b"], "records": [[1, 0, 100, "00000000000000aa", [[1, 0]]]], "spine": []})";
  const PlacementManifest old = parse_placement(v3, "m.json");
  CHECK(old.hosts() == 1);
  CHECK(record_hosts(old, old.records[0]) == std::vector<int>{0});
  CHECK(parse_placement(head_v4("\"drive_hosts\": [0, 0, 0], "), "m.json").hosts() == 1);  // one host, spelled out

  const std::vector<std::pair<std::string, std::string>> cases = {
      {head_v4("\"drive_hosts\": 1, "), "field 'drive_hosts' must list one host per drive (3 drives)"},
      {head_v4("\"drive_hosts\": [0, 1], "), "field 'drive_hosts' must list one host per drive (3 drives)"},
      {head_v4("\"drive_hosts\": [0, 1, 1, 0], "), "field 'drive_hosts' must list one host per drive"},
      {head_v4("\"drive_hosts\": [0, -1, 1], "), "drive_hosts[1]: host must be an integer below 3"},
      {head_v4("\"drive_hosts\": [0, 3, 1], "), "drive_hosts[1]: host must be an integer below 3"},
      {head_v4("\"drive_hosts\": [0, 1.5, 1], "), "drive_hosts[1]: host must be an integer below 3"},
      {head_v4("\"drive_hosts\": [0, \"1\", 1], "), "drive_hosts[1]: host must be an integer below 3"},
      {head_v4("\"drive_hosts\": [0, 2, 2], "), "field 'drive_hosts': host 1 has no drive"},
      {head_v4("\"drive_hosts\": [1, 1, 2], "), "field 'drive_hosts': host 0 has no drive"},
      {R"({"format": "deltafin-placement", "version": 3, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]],
          "drives": ["/a"], "drive_hosts": [0], "records": [], "spine": []})", "field 'drive_hosts' needs manifest version 4"},
      {R"({"format": "deltafin-placement", "version": 5})", "versions 2 to 4"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK_THROWS_WITH(parse_placement(text, "m.json"), Catch::Contains("m.json") && Catch::Contains(expected));
  }
}

TEST_CASE("host_share keeps one host's drives and holders, record_hosts lists the primary's host first",
          "[placement][hosts]") {
  const PlacementManifest m = parse_placement(kTwoHosts, "m.json");
  CHECK(record_hosts(m, m.records[0]) == std::vector<int>{0});
  CHECK(record_hosts(m, m.records[1]) == std::vector<int>{1, 0});
  CHECK(record_hosts(m, m.records[2]) == std::vector<int>{1});

  const PlacementManifest h0 = host_share(m, 0), h1 = host_share(m, 1);
  CHECK(h0.drives == std::vector<std::string>{"/a", "/b"});
  CHECK(h1.drives == std::vector<std::string>{"/c", "/d"});
  for (const PlacementManifest* share : {&h0, &h1}) {
    CHECK(share->hosts() == 1);
    CHECK(share->model == m.model);
    CHECK(share->sources == m.sources);
    CHECK(share->spine_tensor_names() == std::vector<std::string>{"s0", "s1"});  // the staleness check's shards
  }
  CHECK(h0.share_host == 0);
  CHECK(h1.share_host == 1);
  REQUIRE(h0.records.size() == 2);  // 1/0, and 1/1's copy on /b (its drive 1)
  CHECK(h0.records[0].expert == 0);
  CHECK(h0.records[0].holders.size() == 1);
  CHECK(h0.records[0].holders[0].drive == 0);
  CHECK(h0.records[1].expert == 1);
  REQUIRE(h0.records[1].holders.size() == 1);
  CHECK(h0.records[1].holders[0].drive == 1);
  CHECK(h0.records[1].xxh3 == 0xbb);
  CHECK(h0.find(1, 2) == nullptr);
  REQUIRE(h1.records.size() == 2);  // 1/1 on /d, 1/2 on /c and /d, renumbered
  CHECK(h1.find(1, 0) == nullptr);
  REQUIRE(h1.find(1, 1));
  CHECK(h1.find(1, 1)->holders.size() == 1);
  CHECK(h1.find(1, 1)->holders[0].drive == 1);
  REQUIRE(h1.find(1, 2));
  CHECK(h1.find(1, 2)->holders.size() == 2);
  CHECK(h1.find(1, 2)->holders[0].drive == 0);
  CHECK(h1.find(1, 2)->holders[1].drive == 1);
  CHECK(h1.find(1, 2)->holders[1].offset == 4096);
  REQUIRE(h0.spine.size() == 1);
  CHECK(h0.spine[0].tensor == "s0");
  REQUIRE(h1.spine.size() == 1);
  CHECK(h1.spine[0].tensor == "s1");
  CHECK(h1.spine[0].holders[0].drive == 0);
  CHECK(parse_placement(placement_json(h1), "h1.json").records.size() == 2);  // a share prints as a valid manifest

  // A one-host manifest's share 0 is the whole manifest.
  const PlacementManifest one = host_share(host_share(m, 1), 0);
  CHECK(one.records.size() == h1.records.size());
  CHECK(one.spine_tensor_names() == std::vector<std::string>{"s0", "s1"});
  CHECK_THROWS_WITH(host_share(m, 2), Catch::Contains("host 2 is not in the placement"));
  CHECK_THROWS_WITH(host_share(m, -1), Catch::Contains("host -1 is not in the placement"));
}

TEST_CASE("place --hosts 2 and 3: equal shares on each host's drives, shares read the shards' bytes",
          "[placement][hosts]") {
  Bench b("k2_tiny");
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  const std::string reference = run_stdout(greedy(b.model, " --placement none")).output;
  auto shards = ExpertReader::from_shards(*index, experts, {});
  for (const int hosts : {2, 3}) {
    INFO("hosts " << hosts);
    const int per_host = 2;
    const std::string manifest = b.place(hosts * per_host, fmt::format("hosts{}.json", hosts), fmt::format(" --hosts {}", hosts));
    const PlacementManifest m = read_placement(manifest);
    REQUIRE(m.hosts() == hosts);
    for (int d = 0; d < hosts * per_host; ++d) CHECK(m.drive_host(d) == d / per_host);
    for (const PlacedRecord& r : m.records) {  // each expert on the drives of exactly one host
      REQUIRE(r.holders.size() == 1);
      CHECK(record_hosts(m, r).size() == 1);
    }
    const auto count = primaries(m);
    for (int64_t layer = 0; layer < experts.layers(); ++layer) {
      if (!experts.has(layer)) continue;
      int low = 1 << 30, high = 0;
      for (int h = 0; h < hosts; ++h) low = std::min(low, count.count({layer, h}) ? count.at({layer, h}) : 0),
                                      high = std::max(high, count.count({layer, h}) ? count.at({layer, h}) : 0);
      CHECK(high - low <= 1);  // equal shares per layer
    }
    std::vector<int> per_drive(m.drives.size(), 0);  // each host's experts spread over its drives
    for (const PlacedRecord& r : m.records) ++per_drive[r.holders[0].drive];
    for (int h = 0; h < hosts; ++h) CHECK(std::abs(per_drive[2 * h] - per_drive[2 * h + 1]) <= 2);
    REQUIRE(!m.spine.empty());
    for (const PlacedSpineRecord& r : m.spine)
      for (const PlacementHolder& holder : r.holders) CHECK(on_host(holder, 0, per_host));  // rank 0 streams the spine

    // Each host's reader holds exactly that host's experts and reads the shards' bytes; the
    // others fail in one line naming the expert and the placement.
    std::vector<int> holders_of(static_cast<size_t>(experts.layers() * experts.experts()), 0);
    for (int h = 0; h < hosts; ++h) {
      auto reader = ExpertReader::from_placement(host_share(m, h), manifest, *index, experts, {});
      for (int64_t layer = 0; layer < experts.layers(); ++layer) {
        if (!experts.has(layer)) continue;
        for (int64_t e = 0; e < experts.experts(); ++e) {
          const bool mine = m.drive_host(m.find(layer, e)->holders[0].drive) == h;
          REQUIRE(reader->holds(layer, e) == mine);
          std::string error, expected_error;
          const std::string bytes = read_record(*reader, layer, e, &error);
          if (mine) {
            ++holders_of[static_cast<size_t>(layer * experts.experts() + e)];
            CHECK(error.empty());
            CHECK(bytes == read_record(*shards, layer, e, &expected_error));
          } else {
            CHECK(error == fmt::format("layer {} expert {} is not on this host's drives (placement {})", layer, e, manifest));
          }
        }
      }
      CHECK(reader->drive_stats().size() == static_cast<size_t>(per_host));
    }
    for (int64_t layer = 0; layer < experts.layers(); ++layer)
      for (int64_t e = 0; e < experts.experts() && experts.has(layer); ++e)
        CHECK(holders_of[static_cast<size_t>(layer * experts.experts() + e)] == 1);

    // On a machine that sees every drive, the whole placement verifies and runs as before.
    const auto verify = run_deltafin("verify -m " + b.model + " --placement " + manifest);
    INFO(verify.output);
    CHECK(verify.exit_code == 0);
    CHECK(run_stdout(greedy(b.model, " --placement " + manifest)).output == reference);

    // A vanished drive of the last host stops that host's reader in one line; the others open.
    fs::remove(m.drives.back());
    CHECK_THROWS_WITH(ExpertReader::from_placement(host_share(m, hosts - 1), manifest, *index, experts, {}),
                      Catch::Contains(m.drives.back()) && Catch::Contains("holds this host's only copy of expert"));
    CHECK(ExpertReader::from_placement(host_share(m, 0), manifest, *index, experts, {})->holds(m.records.front().layer, m.records.front().expert) ==
          (m.drive_host(m.records.front().holders[0].drive) == 0));
  }
}

TEST_CASE("place --host-weights shares each layer in proportion, and --replicate-hosts copies the hot experts to every host",
          "[placement][hosts]") {
  Bench b("k2_tiny");
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  const std::vector<std::string> four{b.drive(0), b.drive(1), b.drive(2), b.drive(3)};
  PlacementPlanOptions weighted{four, nullptr, 0, {}};
  weighted.hosts = 2;
  weighted.host_weights = {3, 1};
  const PlacementManifest m = plan_placement(experts, weighted);
  const auto count = primaries(m);
  for (int64_t layer = 0; layer < experts.layers(); ++layer) {
    if (!experts.has(layer)) continue;
    INFO("layer " << layer);
    CHECK(std::abs(count.at({layer, 0}) - 3 * experts.experts() / 4) <= 1);
    CHECK(std::abs(count.at({layer, 1}) - experts.experts() / 4) <= 1);
  }
  CHECK(placement_json(plan_placement(experts, weighted)) == placement_json(m));  // deterministic

  // The same through the CLI, and the shares read the shards' bytes.
  const std::string manifest = b.place(4, "weighted.json", " --hosts 2 --host-weights 3,1");
  const PlacementManifest placed = read_placement(manifest);
  CHECK(primaries(placed) == count);
  auto shards = ExpertReader::from_shards(*index, experts, {});
  for (int h = 0; h < 2; ++h) {
    auto reader = ExpertReader::from_placement(host_share(placed, h), manifest, *index, experts, {});
    for (const PlacedRecord& r : host_share(placed, h).records) {
      std::string error, shard_error;
      CHECK(read_record(*reader, r.layer, r.expert, &error) == read_record(*shards, r.layer, r.expert, &shard_error));
      CHECK(error.empty());
    }
  }

  // Hot experts by usage: the most used quarter on both hosts (primary on its own host, first).
  const std::string usage = b.path("usage.json");
  REQUIRE(run_deltafin(greedy(b.model, " --record-usage " + usage)).exit_code == 0);
  const ExpertUsage counts = read_usage(usage, model_fingerprint(experts), experts);
  PlacementPlanOptions hot{four, &counts, 0, {}};
  hot.hosts = 2;
  hot.replicate_hosts = 0.25;
  const PlacementManifest hm = plan_placement(experts, hot);
  uint64_t both = 0, min_both = UINT64_MAX, max_one = 0;
  for (const PlacedRecord& r : hm.records) {
    const std::vector<int> on = record_hosts(hm, r);
    CHECK(on.front() == hm.drive_host(r.holders.front().drive));
    for (const PlacementHolder& holder : r.holders) CHECK(std::count(on.begin(), on.end(), hm.drive_host(holder.drive)) == 1);
    if (on.size() == 2) ++both, min_both = std::min(min_both, counts[r.layer][r.expert]);
    else max_one = std::max(max_one, counts[r.layer][r.expert]);
    CHECK(r.holders.size() == on.size());  // one drive per host without --replicate
  }
  CHECK(both == hm.records.size() / 4);
  CHECK(min_both >= max_one);

  // --replicate-hosts 1: every expert on every host; --replicate 1 within each host: every drive.
  PlacementPlanOptions all{four, nullptr, 1, {}};
  all.hosts = 2;
  all.replicate_hosts = 1;
  for (const PlacedRecord& r : plan_placement(experts, all).records) CHECK(r.holders.size() == 4);
  PlacementPlanOptions mirrored{four, nullptr, 1, placeable_spine_tensors(*index, experts)};
  mirrored.hosts = 2;
  const PlacementManifest mm = plan_placement(experts, mirrored);
  for (const PlacedRecord& r : mm.records) {
    REQUIRE(r.holders.size() == 2);  // both drives of its one host
    CHECK(r.holders[0].drive / 2 == r.holders[1].drive / 2);
  }
  for (const PlacedSpineRecord& r : mm.spine) {  // on every drive of host 0 only
    REQUIRE(r.holders.size() == 2);
    CHECK(r.holders[0].drive + r.holders[1].drive == 1);
  }
}

TEST_CASE("place --hosts: one host is as before, bad host flags are refused in one line", "[placement][hosts][bad-input]") {
  Bench b("k2_tiny");
  const std::string plain = b.place(2, "plain.json"), one = b.place(2, "one.json", " --hosts 1");
  std::ifstream a(plain), c(one);
  std::stringstream sa, sc;
  sa << a.rdbuf();
  sc << c.rdbuf();
  CHECK(sa.str() == sc.str());
  CHECK(sa.str().find("\"version\": 3") != std::string::npos);
  CHECK(sa.str().find("drive_hosts") == std::string::npos);

  const std::string drives3 = " --drive " + b.drive(0) + " --drive " + b.drive(1) + " --drive " + b.drive(2);
  const std::string drives4 = drives3 + " --drive " + b.drive(3);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --hosts 2" + drives3, "--hosts 2: the 3 --drive directories must split into 2 equal groups"},
      {" --hosts 0" + drives4, "--hosts must be at least 1"},
      {" --hosts 5" + drives4, "--hosts 5: the 4 --drive directories must split into 5 equal groups"},
      {" --hosts 2 --host-weights 1" + drives4, "--host-weights: give 2 positive numbers"},
      {" --hosts 2 --host-weights 1,x" + drives4, "--host-weights: give 2 positive numbers"},
      {" --hosts 2 --host-weights 1,-2" + drives4, "--host-weights: give 2 positive numbers"},
      {" --hosts 2 --host-weights 1,0" + drives4, "--host-weights: give 2 positive numbers"},
      {" --hosts 2 --host-weights 1,2," + drives4, "--host-weights: give 2 positive numbers"},
      {" --hosts 2 --host-weights 1,inf" + drives4, "--host-weights: give 2 positive numbers"},
      {" --hosts 2 --replicate-hosts 0.5" + drives4, "--replicate-hosts 0.5 needs --usage FILE"},
      {" --hosts 2 --replicate-hosts 2" + drives4, "--replicate-hosts must be between 0 and 1"},
      {" --replicate-hosts 1" + drives4, "--replicate-hosts copies experts to every host: it needs --hosts 2 or more"},
  };
  for (const auto& [flags, expected] : cases) {
    const auto r = run_deltafin("place -m " + b.model + " --out " + b.path("bad.json") + flags);
    INFO(flags << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find(expected) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}
