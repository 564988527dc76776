// Stage 5: placement (deltafin place / verify), the drive reader and the expert store.
// Exactness: the generated ids are identical whether experts come from the shards or from a
// placement on 1-3 drives, with or without replicas, at any cache budget, piece size and with
// the page cache bypassed or not. Faults: a missing, truncated or corrupt drive falls back to
// another holder, or stops with one line naming the drive and the expert.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <deltafin/engine.hpp>

#include "io/expert_reader.hpp"
#include "io/expert_store.hpp"
#include "io/placer.hpp"
#include "model/family.hpp"
#include "placement_bench.hpp"
#include "test_util.hpp"
#include "util/error.hpp"
#include "weights/placement.hpp"
#include "weights/spine_tensors.hpp"

namespace fs = std::filesystem;
using namespace deltafin;
using test::run_deltafin;
using test::Bench;
using test::flip_byte;
using test::greedy;
using test::lines_with;
using test::run_stdout;

TEST_CASE("placement: ids identical across drive counts, replicas, cache budgets, pieces and bypass", "[placement]") {
  for (const char* fixture : {"k2_tiny", "k3_tiny_mxfp4", "k2_tiny_int4"}) {
    INFO(fixture);
    Bench b(fixture);
    const auto reference = run_deltafin(greedy(b.model, " --placement none"));
    REQUIRE(reference.exit_code == 0);
    const std::string one = b.place(1, "one.json");
    const std::string three = b.place(3, "three.json");
    const std::string mirrored = b.place(2, "mirrored.json", " --replicate 1");
    for (const std::string& manifest : {one, three, mirrored})
      for (const char* extra : {"", " --cache-gb 0.0000123", " --no-bypass --cache-gb 0.0001", " --io-piece-mb 0.004 --io-depth 1",
                                " --threads 1", " --lookahead --cache-gb 0.0001"}) {
        INFO(manifest << extra);
        CHECK(run_deltafin(greedy(b.model, " --placement " + manifest + extra)).output == reference.output);
      }
    // The placement next to the model is found without --placement.
    b.place(2, "model/deltafin-placement.json");
    const auto found = run_deltafin(greedy(b.model, " --stats=full"));
    CHECK(found.output.find("deltafin-placement.json") != std::string::npos);
  }
}

TEST_CASE("placement: records are aligned, balanced per layer, and replicated by usage", "[placement]") {
  Bench b("k2_tiny");
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  const PlacementManifest m = plan_placement(experts, {{b.drive(0), b.drive(1), b.drive(2)}, nullptr, 0, {}});
  std::vector<std::vector<int>> per_layer_drive(experts.layers(), std::vector<int>(3, 0));
  for (const PlacedRecord& r : m.records) {
    REQUIRE(r.holders.size() == 1);
    CHECK(r.holders[0].offset % 4096 == 0);
    ++per_layer_drive[r.layer][r.holders[0].drive];
  }
  for (const auto& counts : per_layer_drive)  // each layer's experts spread evenly
    if (counts[0] + counts[1] + counts[2] > 0)
      CHECK(*std::max_element(counts.begin(), counts.end()) - *std::min_element(counts.begin(), counts.end()) <= 1);

  // Usage recorded by a run picks the replicated experts: the most used quarter is on every drive.
  const std::string usage = b.path("usage.json");
  REQUIRE(run_deltafin(greedy(b.model, " --record-usage " + usage)).exit_code == 0);
  const ExpertUsage counts = read_usage(usage, model_fingerprint(experts), experts);
  const PlacementManifest hot = plan_placement(experts, {{b.drive(0), b.drive(1)}, &counts, 0.25, {}});
  uint64_t replicated = 0, min_replicated = UINT64_MAX, max_single = 0;
  for (const PlacedRecord& r : hot.records) {
    const uint64_t n = counts[r.layer][r.expert];
    if (r.holders.size() == 2) ++replicated, min_replicated = std::min(min_replicated, n);
    else max_single = std::max(max_single, n);
  }
  CHECK(replicated == hot.records.size() / 4);
  CHECK(min_replicated >= max_single);
  uint64_t total = 0;
  for (const auto& row : counts)
    for (uint64_t n : row) total += n;
  CHECK(total > 0);
  CHECK_THROWS_WITH(plan_placement(experts, {{b.drive(0)}, nullptr, 0.5, {}}), Catch::Contains("--usage"));
}

TEST_CASE("verify: a clean placement passes, and a flipped byte names the drive and the expert", "[placement]") {
  Bench b("k2_tiny");
  const std::string manifest = b.place(2, "p.json");
  const auto ok = run_deltafin("verify -m " + b.model + " --placement " + manifest);
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(ok.output.find("all match") != std::string::npos);
  const PlacementManifest m = read_placement(manifest);
  const PlacedRecord& victim = m.records[5];
  flip_byte(m.drives[victim.holders[0].drive], victim.holders[0].offset + 100);
  const auto bad = run_deltafin("verify -m " + b.model + " --placement " + manifest);
  INFO(bad.output);
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find(fmt::format("expert {}/{}", victim.layer, victim.expert)) != std::string::npos);
  CHECK(bad.output.find(m.drives[victim.holders[0].drive]) != std::string::npos);
  CHECK(bad.output.find("checksum mismatch") != std::string::npos);
}

// Issue 12, item 2: experts replaced by others of the same shapes after placing.
TEST_CASE("a placement whose checkpoint changed is refused by run and reported by verify", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string manifest = b.place(1, "p.json");
  const std::string good_ids = run_stdout(greedy(b.model, " --placement " + manifest)).output;
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  const TensorRef& tensor = record_part_tensor(experts.at(1, 3), 0);
  const std::string shard = index->shard_path(tensor.shard);
  const std::string shard_name = fs::path(shard).filename().string();
  const auto then = fs::last_write_time(shard);
  // A "new revision": one expert weight's bytes differ (low mantissa bits of a bf16: still finite).
  flip_byte(shard, tensor.info->offset + 2 * 7);
  fs::last_write_time(shard, then + std::chrono::seconds(5));

  const auto run = run_deltafin(greedy(b.model, " --placement " + manifest));
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find(manifest + ": stale placement: shard " + shard_name + " was modified after the placement was made") !=
        std::string::npos);
  CHECK(std::count(run.output.begin(), run.output.end(), '\n') == 1);

  const auto verify = run_deltafin("verify -m " + b.model + " --placement " + manifest);
  INFO(verify.output);
  CHECK(verify.exit_code == 1);
  CHECK(verify.output.find("stale placement: shard " + shard_name) != std::string::npos);

  // The same bytes change with the old modification time kept (cp -p): only a comparison of the
  // records with the shards can see it.
  fs::last_write_time(shard, then);
  const auto against = run_deltafin("verify -m " + b.model + " --placement " + manifest + " --against-shards");
  INFO(against.output);
  CHECK(against.exit_code == 1);
  CHECK(against.output.find(shard + ": expert 1/3 (layer/expert, tensor '" + tensor.info->name) != std::string::npos);
  CHECK(against.output.find("1 of ") != std::string::npos);
  CHECK(against.output.find("records differ from the shards") != std::string::npos);
  CHECK(run_deltafin("verify -m " + b.model + " --placement " + manifest + " --against-shards --update-sources").exit_code == 1);

  // Back to the placed bytes, touched: verify --against-shards --update-sources accepts the
  // shards again, and run gives the ids it gave before.
  flip_byte(shard, tensor.info->offset + 2 * 7);
  fs::last_write_time(shard, then + std::chrono::seconds(9));
  CHECK(run_deltafin(greedy(b.model, " --placement " + manifest)).exit_code == 1);
  const auto update = run_deltafin("verify -m " + b.model + " --placement " + manifest + " --against-shards --update-sources");
  INFO(update.output);
  CHECK(update.exit_code == 0);
  CHECK(update.output.find("recorded the shards' current sizes and times") != std::string::npos);
  CHECK(run_stdout(greedy(b.model, " --placement " + manifest)).output == good_ids);
  CHECK(run_deltafin("verify -m " + b.model + " --placement " + manifest).exit_code == 0);
}

TEST_CASE("a placement's shard that grew or shrank is named", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string manifest = b.place(1, "p.json");
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  const std::string shard = index->shard_path(record_part_tensor(experts.at(1, 0), 0).shard);
  const auto size = fs::file_size(shard);
  std::ofstream(shard, std::ios::app) << "trailing";
  const auto r = run_deltafin(greedy(b.model, " --placement " + manifest));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find(fmt::format("shard {} changed since the placement was made ({} bytes then, {} now)",
                                  fs::path(shard).filename().string(), size, size + 8)) != std::string::npos);
}

TEST_CASE("place resumes after an interruption and gives the same manifest", "[placement]") {
  Bench b("k2_tiny");
  const std::string clean = b.place(2, "clean.json");
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  const PlacementManifest plan =  // the plan `place` makes, spine records included
      plan_placement(experts, {{b.drive(0), b.drive(1)}, nullptr, 0, placeable_spine_tensors(*index, experts)});
  REQUIRE(!plan.spine.empty());
  const std::string out = b.path("resumed.json");
  // Interrupt after 40 records (the journal has synced none of them yet: batches are 256 MB).
  CHECK_THROWS(write_placement(*index, experts, plan, out, [](const PlaceProgress& p) {
    if (p.records_done == 40) throw Error("interrupted");
  }));
  CHECK(!fs::exists(out));
  CHECK(fs::exists(out + ".journal"));
  CHECK(fs::exists(plan.drives[0] + ".partial"));
  // A journal that lists synced records lets the next run skip them.
  {
    std::ifstream in(out + ".journal");
    std::string magic, hash;
    std::getline(in, magic);
    std::getline(in, hash);
    const PlacementManifest reference = read_placement(clean);
    std::ofstream journal(out + ".journal", std::ios::trunc);
    journal << magic << '\n' << hash << '\n';
    for (size_t i = 0; i < 30; ++i) journal << i << ' ' << fmt::format("{:016x}", reference.records[i].xxh3) << '\n';
  }
  const auto again = run_deltafin("place -m " + b.model + " --out " + out + " --drive " + b.drive(0) + " --drive " + b.drive(1));
  INFO(again.output);
  CHECK(again.output.find("30 records resumed") != std::string::npos);
  std::ifstream a(clean), c(out);
  std::stringstream sa, sc;
  sa << a.rdbuf();
  sc << c.rdbuf();
  CHECK(sa.str() == sc.str());
  CHECK(!fs::exists(out + ".journal"));
  CHECK(run_deltafin("verify -m " + b.model + " --placement " + out).exit_code == 0);

  // Interrupted among the spine records: their journal indices follow the experts'.
  const std::string late = b.path("late.json");
  const size_t experts_and_three = plan.records.size() + 3;
  CHECK_THROWS(write_placement(*index, experts, plan, late, [&](const PlaceProgress& p) {
    if (p.records_done == experts_and_three + 2) throw Error("interrupted");
  }));
  {
    std::ifstream in(late + ".journal");
    std::string magic, hash;
    std::getline(in, magic);
    std::getline(in, hash);
    const PlacementManifest reference = read_placement(clean);
    std::ofstream journal(late + ".journal", std::ios::trunc);
    journal << magic << '\n' << hash << '\n';
    for (size_t i = 0; i < reference.records.size(); ++i) journal << i << ' ' << fmt::format("{:016x}", reference.records[i].xxh3) << '\n';
    for (size_t i = 0; i < 3; ++i)
      journal << reference.records.size() + i << ' ' << fmt::format("{:016x}", reference.spine[i].xxh3) << '\n';
  }
  const auto resumed = run_deltafin("place -m " + b.model + " --out " + late + " --drive " + b.drive(0) + " --drive " + b.drive(1));
  INFO(resumed.output);
  CHECK(resumed.output.find(fmt::format("{} records resumed", experts_and_three)) != std::string::npos);
  std::ifstream l(late);
  std::stringstream sl;
  sl << l.rdbuf();
  CHECK(sl.str() == sa.str());
  CHECK(run_deltafin("verify -m " + b.model + " --placement " + late).exit_code == 0);
}

TEST_CASE("faults: missing, truncated and corrupt drives fall back to other holders or stop clearly", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string reference = run_deltafin(greedy(b.model, " --placement none")).output;
  const std::string mirrored = b.place(2, "mirrored.json", " --replicate 1");
  const std::string single = b.place(3, "single.json");
  const PlacementManifest mm = read_placement(mirrored), ms = read_placement(single);

  SECTION("a vanished drive with replicas: same ids, a warning naming it") {
    fs::rename(mm.drives[1], mm.drives[1] + ".gone");
    std::string err;
    CHECK(run_stdout(greedy(b.model, " --placement " + mirrored), &err).output == reference);
    CHECK(err.find(mm.drives[1]) != std::string::npos);
  }
  SECTION("a vanished drive without replicas: one line naming the drive and an expert") {
    fs::remove(ms.drives[2]);
    const auto r = run_deltafin(greedy(b.model, " --placement " + single));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.find(ms.drives[2]) != std::string::npos);
    CHECK(r.output.find("only copy of expert") != std::string::npos);
  }
  SECTION("a truncated drive without replicas") {
    fs::resize_file(ms.drives[0], 8192);
    const auto r = run_deltafin(greedy(b.model, " --placement " + single));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("truncated") != std::string::npos);
  }
  SECTION("a corrupt record: read again from the other copy") {
    for (const PlacedRecord& r : mm.records) flip_byte(mm.drives[r.holders[0].drive], r.holders[0].offset + 7);
    std::string err;
    CHECK(run_stdout(greedy(b.model, " --placement " + mirrored), &err).output == reference);
    CHECK(err.find("checksum mismatch; reading it again from drive") != std::string::npos);
  }
  SECTION("a corrupt drive: caught, re-read from the other copy, then avoided, and counted in the receipt") {
    size_t on_drive0 = 0;
    for (const PlacedRecord& r : mm.records)
      for (const PlacementHolder& h : r.holders)
        if (h.drive == 0) flip_byte(mm.drives[0], h.offset + 7), ++on_drive0;
    std::string err;
    CHECK(run_stdout(greedy(b.model, " --placement " + mirrored + " --threads 1 --stats"), &err).output == reference);
    INFO(err);
    const size_t warnings = lines_with(err, "reading it again from drive");
    CHECK(err.find("checksum mismatch; reading it again from drive 1") != std::string::npos);
    CHECK(err.find("reading it again from drive 0") == std::string::npos);  // never the bad copy again
    CHECK(warnings >= 1);
    CHECK(warnings < on_drive0);  // drive 0 is suspect after its first bad copy: later reads go to drive 1
    CHECK(lines_with(err, fmt::format("bad copies (read again from another drive)  {}", mm.drives[0])) == 1);
    CHECK(err.find("bad copies (read again from another drive)  " + mm.drives[1]) == std::string::npos);
  }
  SECTION("a corrupt record and no other copy: one line naming the drive's file, the expert and its offset") {
    for (const PlacedRecord& r : ms.records) flip_byte(ms.drives[r.holders[0].drive], r.holders[0].offset + 7);
    std::string err;
    const auto r = run_stdout(greedy(b.model, " --placement " + single), &err);
    INFO(err);
    CHECK(r.exit_code == 1);
    CHECK(lines_with(err, "checksum mismatch; no holder has a good copy (corrupt placement; run `deltafin verify`)") == 1);
    bool named = false;  // "drive D (<file>): expert L/E (layer/expert) at offset N: checksum mismatch"
    for (const PlacedRecord& rec : ms.records)
      named = named || err.find(fmt::format("drive {} ({}): expert {}/{} (layer/expert) at offset {}: checksum mismatch",
                                            rec.holders[0].drive, ms.drives[rec.holders[0].drive], rec.layer, rec.expert,
                                            rec.holders[0].offset)) != std::string::npos;
    CHECK(named);
  }
  SECTION("one file named by two drives is refused (it is no replica)") {
    PlacementManifest twice = mm;
    twice.drives[1] = twice.drives[0];  // records on drive 1 now point into drive 0's file
    const std::string path = (fs::path(mirrored).parent_path() / "twice.json").string();
    std::ofstream(path) << placement_json(twice);
    const auto r = run_deltafin(greedy(b.model, " --placement " + path));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("are one file (same device and inode)") != std::string::npos);
  }
  SECTION("a manifest made for another model") {
    Bench other("dsv3_tiny");
    const auto r = run_deltafin(greedy(other.model, " --placement " + single));
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("different model") != std::string::npos);
  }
}

TEST_CASE("place: a second place of the same manifest while one runs is refused in one line", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string manifest = b.path("locked.json");
  // Another process holds the lock (util-linux flock), as a running `deltafin place` would.
  const auto r = deltafin::test::run_command("flock " + manifest + ".lock " + deltafin::test::binary() + " place -m " +
                                             b.model + " --out " + manifest + " --drive " + b.drive(0));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("another `deltafin place` is writing this placement") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(!fs::exists(manifest));
  b.place(1, "locked.json");  // free again: it places, and leaves no lock file behind
  CHECK(!fs::exists(manifest + ".lock"));
}

TEST_CASE("place: a manifest path in a missing directory fails before any data is written", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string before = b.drive(0);
  const auto files = [&] { return std::distance(fs::directory_iterator(before), fs::directory_iterator()); };
  const auto n = files();
  const auto r = run_deltafin("place -m " + b.model + " --out /nonexistent-dir/p.json --drive " + before);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("deltafin: /nonexistent-dir/p.json", 0) == 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(files() == n);
}

TEST_CASE("reader: a drive that starts failing mid-run falls back to its replica", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string mirrored = b.place(2, "mirrored.json", " --replicate 1");
  const PlacementManifest m = read_placement(mirrored);
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  ReaderOptions options;
  options.piece_bytes = 4096;
  auto placed = ExpertReader::from_placement(m, mirrored, *index, experts, options);
  auto shards = ExpertReader::from_shards(*index, experts, options);
  fs::resize_file(m.drives[0], 4096);  // after opening: every read past the first page is short
  auto backend = make_cpu_backend(1);
  ExpertStore from_drives(*backend, *index, experts, *placed, 1 << 20), from_shards(*backend, *index, experts, *shards, 1 << 20);
  for (int32_t e = 0; e < experts.experts(); ++e) {
    from_drives.request(1, std::span(&e, 1));
    from_shards.request(1, std::span(&e, 1));
    const ExpertHandle a = from_drives.acquire(1, e), c = from_shards.acquire(1, e);
    REQUIRE(a->bytes == c->bytes);
    CHECK(std::memcmp(a->record, c->record, a->bytes) == 0);
  }
  const auto drives = placed->drive_stats();
  CHECK(drives[0].failed);
  CHECK(drives[0].errors > 0);
  CHECK(!drives[1].failed);
}

TEST_CASE("store: expert memory stays inside the budget and each expert is read once per pass", "[placement]") {
  for (double budget : {0.0000123, 0.00005, 1.0}) {
    EngineOptions o;
    o.model_dir = test::fixture("k2_tiny");
    o.cache_gb = budget;
    o.placement = "none";
    auto engine = Engine::open(o);
    const std::vector<int32_t> ids = test::read_golden(o.model_dir).all();
    engine->new_session()->append(ids, false);
    const EngineStats s = engine->stats();
    INFO(budget);
    CHECK(s.peak_cache_bytes <= s.cache_budget_bytes);
    CHECK(s.repeat_reads_in_pass == 0);
    CHECK(s.expert_misses <= s.expert_runs);  // one pass: every expert read at most once
  }
}

TEST_CASE("store: demoted experts are evicted first", "[placement]") {
  const std::string dir = test::fixture("k2_tiny");
  const auto index = WeightIndex::open(dir);
  const ExpertTable experts = load_expert_table(dir, *index);
  auto reader = ExpertReader::from_shards(*index, experts, {});
  const uint64_t one = reader->buffer_bytes(1, 0);
  auto backend = make_cpu_backend(1);
  ExpertStore store(*backend, *index, experts, *reader, 2 * one);  // room for two experts
  const int32_t a = 0, c = 1, d = 2;
  for (int32_t e : {a, c}) {
    store.request(1, std::span(&e, 1));
    store.acquire(1, e);
  }
  store.demote(1, std::span(&c, 1));  // c is newer than a, but only a rejected draft used it
  store.request(1, std::span(&d, 1));
  store.acquire(1, d);
  const uint64_t hits = store.stats().hits;
  store.request(1, std::span(&a, 1));
  CHECK(store.stats().hits == hits + 1);  // a stayed
  store.acquire(1, a);
  store.request(1, std::span(&c, 1));
  CHECK(store.stats().hits == hits + 1);  // c was evicted
  store.acquire(1, c);
}

TEST_CASE("placement manifest parser: bad input names the file and the problem", "[placement][bad-input]") {
  const std::string good = R"({"format": "deltafin-placement", "version": 2, "model": "0123456789abcdef", "alignment": 4096,
    "sources": [["model.safetensors", 123, 1700000000000000000]], "drives": ["/a.bin", "/b.bin"], "records": [[1, 0, 100, "00000000000000aa", [[0, 0], [1, 4096]]], [1, 1, 5, "00000000000000bb", [[1, 0]]]]})";
  CHECK(parse_placement(good, "m.json").records.size() == 2);
  CHECK(parse_placement(placement_json(parse_placement(good, "m.json")), "m.json").records[0].holders[1].offset == 4096);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "broken"},
      {R"({"format": "x"})", "not a deltafin placement"},
      {R"({"format": "deltafin-placement", "version": 9})", "version"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 1000, "drives": ["/a"], "records": []})", "alignment"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": [], "records": []})", "drives"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a"], "records": [[1, 0, 10, "00000000000000aa", [[1, 0]]]]})", "drive"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a"], "records": [[1, 0, 10, "00000000000000aa", [[0, 100]]]]})", "aligned"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a"], "records": [[1, 0, 10, "zz", [[0, 0]]]]})", "checksum"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a"], "records": [[1, 1, 10, "00000000000000aa", [[0, 0]]], [1, 0, 10, "00000000000000aa", [[0, 4096]]]]})", "sorted"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a", "/b"], "records": [[1, 0, 10, "00000000000000aa", [[0, 0], [0, 4096]]]]})", "twice"},
      // Issue 12, item 2: the shards a placement was made from.
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "drives": ["/a"], "records": []})", "sources"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", -1, 2]], "drives": ["/a"], "records": []})", "source 0"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["../s", 1, 2]], "drives": ["/a"], "records": []})", "not a plain file name"},
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2], ["s", 3, 4]], "drives": ["/a"], "records": []})", "listed twice"},
      {R"({"format": "deltafin-placement", "version": 1, "model": "m", "alignment": 4096, "drives": ["/a"], "records": []})", "versions 2 to 4"},
      // Issue 12, item 4: two records sharing bytes of one drive (a swapped or shifted offset).
      {R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a"], "records": [[1, 0, 5000, "00000000000000aa", [[0, 0]]], [1, 1, 10, "00000000000000bb", [[0, 4096]]]]})", "records 0 and 1 overlap on drive 0 (at offset 4096)"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK_THROWS_WITH(parse_placement(text, "m.json"), Catch::Contains("m.json") && Catch::Contains(expected));
  }
}

// Issue 16, item 2: spine records. `place` gives every spine matrix tensor an aligned record of
// its own on the drives (spread, or on every drive with --replicate); a run whose spine streams
// reads those records instead of the shards, and its logits stay bit-identical.
namespace {

struct SpinePass {
  std::vector<float> logits;
  ModelSummary summary;
  EngineStats stats;
};

// All logits of the golden ids from `placement` ("none": the shards) under `memory_gb` (0: the default).
SpinePass spine_pass(const std::string& model, const std::string& placement, double memory_gb) {
  EngineOptions o;
  o.model_dir = model;
  o.placement = placement;
  o.memory_gb = memory_gb;
  o.chunk = 3;
  o.threads = 2;
  auto engine = Engine::open(o);
  SpinePass p;
  p.logits = engine->new_session()->append(test::read_golden(model).all(), true);
  p.summary = engine->summary();
  p.stats = engine->stats();
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The manifest as version 2 wrote it: no spine records.
std::string as_version_2(PlacementManifest m) {
  m.spine.clear();
  std::string text = placement_json(m);
  const std::string v3 = "\"version\": 3", spine = ",\n \"spine\": [\n ]";
  REQUIRE(text.find(v3) != std::string::npos);
  REQUIRE(text.find(spine) != std::string::npos);
  text.replace(text.find(v3), v3.size(), "\"version\": 2");
  text.erase(text.find(spine), spine.size());
  return text;
}

}  // namespace

TEST_CASE("spine records: placed aligned, spread or replicated, and read when the spine streams, bit-identical",
          "[placement][memory-budget][exactness]") {
  for (const char* fixture : {"k2_tiny", "k3_tiny_mxfp4", "k2_tiny_fp8"}) {
    INFO(fixture);
    Bench b(fixture);
    const std::string spread = b.place(2, "spread.json"), mirrored = b.place(3, "mirrored.json", " --replicate 1");
    const PlacementManifest ms = read_placement(spread), mm = read_placement(mirrored);
    REQUIRE(!ms.spine.empty());
    REQUIRE(ms.spine.size() == mm.spine.size());
    const auto index = WeightIndex::open(b.model);
    const TensorRef* embed = index->find("model.embed_tokens.weight");
    REQUIRE(embed);
    std::vector<uint64_t> spine_on_drive(2, 0);
    bool has_embedding = false;
    for (size_t i = 0; i < ms.spine.size(); ++i) {
      const PlacedSpineRecord& r = ms.spine[i];
      REQUIRE(r.holders.size() == 1);
      CHECK(r.holders[0].offset % 4096 == 0);
      spine_on_drive[r.holders[0].drive] += r.payload;
      has_embedding = has_embedding || (r.tensor == embed->info->name && r.payload == embed->info->nbytes);
      CHECK(mm.spine[i].holders.size() == 3);
      CHECK(mm.spine[i].xxh3 == r.xxh3);
    }
    CHECK(has_embedding);
    CHECK(spine_on_drive[0] > 0);
    CHECK(spine_on_drive[1] > 0);
    for (const PlacedSpineRecord& r : ms.spine) {  // no routed-expert tensor gets a spine record
      INFO(r.tensor);
      CHECK(r.tensor.find(".experts.") == std::string::npos);
    }
    const std::string old_path = b.path("v2.json");
    std::ofstream(old_path) << as_version_2(ms);
    CHECK(read_placement(old_path).spine.empty());

    const SpinePass resident = spine_pass(b.model, "none", 0);
    REQUIRE(resident.summary.spine_units_streamed == 0);
    const double budget = resident.summary.minimum_bytes / 1e9 + 0.00002;  // (nearly) every unit streams
    const SpinePass shards = spine_pass(b.model, "none", budget);
    REQUIRE(shards.summary.spine_units_streamed > 0);
    CHECK(shards.stats.spine_bytes_read > 0);
    CHECK(shards.stats.spine_record_bytes_read == 0);
    CHECK(same_bits(resident.logits, shards.logits));
    for (const std::string& manifest : {spread, mirrored}) {
      INFO(manifest);
      const SpinePass placed = spine_pass(b.model, manifest, budget);
      CHECK(same_bits(resident.logits, placed.logits));
      CHECK(placed.stats.spine_bytes_read == shards.stats.spine_bytes_read);
      CHECK(placed.stats.spine_record_bytes_read == placed.stats.spine_bytes_read);  // every streamed byte from a record
    }
    const SpinePass old = spine_pass(b.model, old_path, budget);  // version 2: the spine from the shards, as before
    CHECK(same_bits(resident.logits, old.logits));
    CHECK(old.stats.spine_bytes_read == shards.stats.spine_bytes_read);
    CHECK(old.stats.spine_record_bytes_read == 0);
    const SpinePass unconstrained = spine_pass(b.model, spread, 0);  // resident: the records are not read
    CHECK(same_bits(resident.logits, unconstrained.logits));
    CHECK(unconstrained.stats.spine_bytes_read == 0);
  }
}

TEST_CASE("spine records: greedy ids of a streamed run from the drives equal the shards'", "[placement][memory-budget]") {
  Bench b("k3_tiny_mxfp4");
  const std::string manifest = b.place(2, "p.json", " --replicate 1");
  const std::string reference = run_stdout(greedy(b.model, " --placement none")).output;
  const SpinePass resident = spine_pass(b.model, "none", 0);
  const std::string budget = fmt::format(" --memory-gb {:.6f}", resident.summary.minimum_bytes / 1e9 + 0.00002);
  CHECK(run_stdout(greedy(b.model, " --placement none" + budget)).output == reference);
  std::string receipt;
  const auto placed = run_stdout(greedy(b.model, " --placement " + manifest + budget + " --stats=full"), &receipt);
  CHECK(placed.exit_code == 0);
  CHECK(placed.output == reference);
  // The receipt says how much of the streamed spine came from the drives' records: all of it.
  INFO(receipt);
  const size_t at = receipt.find("\nspine     ");
  REQUIRE(at != std::string::npos);
  const std::string line = receipt.substr(at + 1, receipt.find('\n', at + 1) - at - 1);
  double all = 0, records = 0;
  REQUIRE(std::sscanf(line.c_str(), "spine     %lf GB streamed in all (%lf GB of it from spine records)", &all, &records) == 2);
  CHECK(all > 0);
  CHECK(records == all);
  std::string none_receipt;
  run_stdout(greedy(b.model, " --placement none" + budget + " --stats=full"), &none_receipt);
  CHECK(none_receipt.find("(0.0000 GB of it from spine records)") != std::string::npos);
}

TEST_CASE("spine records: a corrupt or truncated one is named by verify and never gives wrong logits", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string single = b.place(2, "single.json"), mirrored = b.place(2, "mirrored.json", " --replicate 1");
  const PlacementManifest ms = read_placement(single), mm = read_placement(mirrored);
  const auto index = WeightIndex::open(b.model);
  const TensorRef* embed = index->find("model.embed_tokens.weight");
  REQUIRE(embed);
  const auto embedding = std::find_if(ms.spine.begin(), ms.spine.end(), [&](const PlacedSpineRecord& r) { return r.tensor == embed->info->name; });
  REQUIRE(embedding != ms.spine.end());
  const PlacedSpineRecord& victim = *embedding;  // streamed at the minimum budget
  const PlacementHolder& where = victim.holders.front();
  const SpinePass resident = spine_pass(b.model, "none", 0);
  const double budget = resident.summary.minimum_bytes / 1e9 + 0.00002;
  REQUIRE(run_deltafin("verify -m " + b.model + " --placement " + single).exit_code == 0);

  SECTION("a flipped byte: verify names the drive's file and the tensor in one line") {
    flip_byte(ms.drives[where.drive], where.offset + victim.payload / 2);
    const auto r = run_deltafin("verify -m " + b.model + " --placement " + single);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(lines_with(r.output, "spine tensor '" + victim.tensor + "'") == 1);
    CHECK(lines_with(r.output, ms.drives[where.drive] + "): spine tensor '" + victim.tensor + "' at offset " +
                                   std::to_string(where.offset) + ": checksum mismatch") == 1);
    CHECK(r.output.find("1 of ") != std::string::npos);
    // A streamed run checks the record as it reads it: one line naming the drive, tensor and offset, no logits.
    CHECK_THROWS_WITH(spine_pass(b.model, single, budget),
                      Catch::Contains(ms.drives[where.drive] + "): spine tensor '" + victim.tensor + "' at offset " +
                                      std::to_string(where.offset) + ": checksum mismatch; no holder has a good copy"));
  }
  SECTION("a flipped byte with a replica: the run reads the other copy, bit-identical") {
    for (const PlacedSpineRecord& r : mm.spine) flip_byte(mm.drives[r.holders[0].drive], r.holders[0].offset + 1);
    const SpinePass placed = spine_pass(b.model, mirrored, budget);
    CHECK(same_bits(resident.logits, placed.logits));
    CHECK(placed.stats.spine_record_bytes_read == placed.stats.spine_bytes_read);
    const auto r = run_deltafin("verify -m " + b.model + " --placement " + mirrored);
    CHECK(r.exit_code == 1);
    CHECK(lines_with(r.output, "checksum mismatch") == mm.spine.size());
  }
  SECTION("a truncated drive: verify names the file and the tensor, and exits 1") {
    const PlacedSpineRecord* last = nullptr;  // the record that ends drive 0's file
    for (const PlacedSpineRecord& r : ms.spine)
      if (r.holders[0].drive == 0 && (!last || r.holders[0].offset > last->holders[0].offset)) last = &r;
    REQUIRE(last);
    fs::resize_file(ms.drives[0], last->holders[0].offset + 100);
    const auto r = run_deltafin("verify -m " + b.model + " --placement " + single);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(lines_with(r.output, "spine tensor '" + last->tensor + "'") == 1);
    CHECK(lines_with(r.output, ms.drives[0]) >= 1);
    CHECK(r.output.find("truncated") != std::string::npos);
  }
  SECTION("a spine record of a tensor the checkpoint lacks: run refuses the placement in one line") {
    PlacementManifest renamed = ms;
    renamed.spine.front().tensor = "model.no_such.weight";
    const std::string path = b.path("renamed.json");
    std::ofstream(path) << placement_json(renamed);
    const auto r = run_deltafin(greedy(b.model, " --placement " + path));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.find(path + ": spine tensor 'model.no_such.weight' is not in the checkpoint") != std::string::npos);
    const auto v = run_deltafin("verify -m " + b.model + " --placement " + path + " --against-shards");
    CHECK(v.exit_code == 1);
    CHECK(v.output.find("spine tensor 'model.no_such.weight' is not in the checkpoint") != std::string::npos);
  }
}

TEST_CASE("placement manifest parser: version 3 spine records are checked, version 2 still reads", "[placement][bad-input]") {
  const std::string head = R"({"format": "deltafin-placement", "version": 3, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a", "/b"], "records": [[1, 0, 100, "00000000000000aa", [[0, 0]]]], )";
  const PlacementManifest good = parse_placement(head + R"("spine": [["model.embed_tokens.weight", 5000, "00000000000000cc", [[0, 4096], [1, 0]]]]})", "m.json");
  REQUIRE(good.spine.size() == 1);
  CHECK(good.spine[0].tensor == "model.embed_tokens.weight");
  CHECK(good.spine[0].payload == 5000);
  CHECK(good.spine[0].xxh3 == 0xcc);
  CHECK(good.spine[0].holders[1].drive == 1);
  CHECK(parse_placement(placement_json(good), "m.json").spine[0].holders[0].offset == 4096);
  const std::string v2 = R"({"format": "deltafin-placement", "version": 2, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a"], "records": []})";
  CHECK(parse_placement(v2, "m.json").spine.empty());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + "\"spine\": 3}", "field 'spine' must be a list"},
      {R"({"format": "deltafin-placement", "version": 3, "model": "m", "alignment": 4096, "sources": [["s", 1, 2]], "drives": ["/a"], "records": []})", "field 'spine'"},
      {head + R"("spine": [["t", 10, "00000000000000cc"]]})", "spine record 0: expected [tensor name, bytes, xxh3, holders]"},
      {head + R"("spine": [["", 10, "00000000000000cc", [[0, 8192]]]]})", "spine record 0: the tensor name is empty"},
      {head + R"("spine": [["t", 0, "00000000000000cc", [[0, 8192]]]]})", "bytes must be positive"},
      {head + R"("spine": [["t", 10, "cc", [[0, 8192]]]]})", "spine record 0: checksum"},
      {head + R"("spine": [["t", 10, "00000000000000cc", [[2, 8192]]]]})", "spine record 0: drive must be an integer below 2"},
      {head + R"("spine": [["t", 10, "00000000000000cc", [[0, 100]]]]})", "spine record 0: offset 100 is not 4096-aligned"},
      {head + R"("spine": [["t", 10, "00000000000000cc", [[0, 8192]]], ["t", 10, "00000000000000cc", [[1, 0]]]]})", "spine record 1: tensor 't' is listed twice"},
      {head + R"("spine": [["t", 10, "00000000000000cc", [[0, 0]]]]})", "spine record 0 and record 0 overlap on drive 0 (at offset 0)"},
      {head + R"("spine": [["t", 10, "00000000000000cc", [[1, 0]]], ["u", 10, "00000000000000cc", [[1, 0]]]]})", "spine record 0 and spine record 1 overlap on drive 1"},
      {R"({"format": "deltafin-placement", "version": 5})", "versions 2 to 4"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK_THROWS_WITH(parse_placement(text, "m.json"), Catch::Contains("m.json") && Catch::Contains(expected));
  }
}
