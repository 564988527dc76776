// Issue 33, items 5, 7 and 8: every read of a placed record is checked (a drive that goes bad
// mid-run, or during a long serve, is caught on the next read and its records come from a
// replica, bit-identical); a NaN or Inf in a placed expert is a bad copy on its drive; `place`
// runs again over its own leftovers after a full disk, and refuses a second name of one drive
// directory (a bind mount) before writing anything.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "model/family.hpp"
#include "placement_bench.hpp"
#include "test_util.hpp"
#include "weights/expert_record.hpp"
#include "weights/placement.hpp"

namespace fs = std::filesystem;
using namespace deltafin;
using test::Bench;
using test::flip_byte;
using test::greedy;
using test::lines_with;
using test::run_stdout;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// An engine on `placement` whose expert memory holds about one expert, so each pass reads again.
std::unique_ptr<Engine> open_rereading(const std::string& model, const std::string& placement) {
  EngineOptions o;
  o.model_dir = model;
  o.placement = placement;
  o.cache_gb = 0.0000123;
  o.threads = 1;
  return Engine::open(o);
}

// Flips a byte of every record (expert and spine) that drive `drive` holds.
void corrupt_drive(const PlacementManifest& m, int drive) {
  for (const PlacedRecord& r : m.records)
    for (const PlacementHolder& h : r.holders)
      if (h.drive == drive) flip_byte(m.drives[drive], h.offset + 7);
  for (const PlacedSpineRecord& r : m.spine)
    for (const PlacementHolder& h : r.holders)
      if (h.drive == drive) flip_byte(m.drives[drive], h.offset + 7);
}

std::string read_range(const std::string& file, uint64_t offset, uint64_t bytes) {
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string out(bytes, '\0');
  in.read(out.data(), static_cast<std::streamsize>(bytes));
  return out;
}

void write_range(const std::string& file, uint64_t offset, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// `script` run by sh in a mount namespace of its own (its bind mounts and tmpfs vanish with it):
// `unshare -m` as root (CI), else `unshare -rm` (an unprivileged user namespace). Returns false
// where neither is possible (macOS, a container without the capability): the caller skips.
bool run_in_mount_namespace(const std::string& script, test::CommandResult& result) {
  const std::string file = (fs::temp_directory_path() / ("deltafin-ns-" + std::to_string(::getpid()) + ".sh")).string();
  std::ofstream(file) << script;
  std::string unshare;
  for (const char* candidate : {"unshare -m", "unshare -rm"})
    if (test::run_command(std::string(candidate) + " true").exit_code == 0) {
      unshare = candidate;
      break;
    }
#ifdef __linux__
  if (::geteuid() == 0) REQUIRE(unshare == "unshare -m");  // CI runs as root: this test must run there
#endif
  if (unshare.empty()) {
    WARN("no mount namespace (unshare -m) here: not run");
    fs::remove(file);
    return false;
  }
  result = test::run_command(unshare + " sh -eu " + file);
  fs::remove(file);
  return true;
}

size_t files_in(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("reader: a drive corrupted mid-run is caught on the next read, its records read from the replica, bit-identical",
          "[placement][bad-input]") {
  for (const char* fixture : {"k2_tiny", "k3_tiny_mxfp4"}) {
    INFO(fixture);
    Bench b(fixture);
    const std::string mirrored = b.place(2, "mirrored.json", " --replicate 1");
    const PlacementManifest m = read_placement(mirrored);
    const std::vector<int32_t> ids = test::read_golden(b.model).all();
    auto engine = open_rereading(b.model, mirrored);  // one process, as a long run or `serve` is
    const std::vector<float> clean = engine->new_session()->append(ids, true);
    REQUIRE(engine->stats().drives[0].bad_copies == 0);
    REQUIRE(engine->stats().drives[0].reads > 0);
    corrupt_drive(m, 0);  // part of every record on drive 0 overwritten while the engine runs
    for (int pass = 0; pass < 2; ++pass) {
      const std::vector<float> again = engine->new_session()->append(ids, true);
      CHECK(same_bits(clean, again));
    }
    const EngineStats s = engine->stats();
    CHECK(s.drives[0].bad_copies > 0);
    CHECK(s.drives[1].bad_copies == 0);
    CHECK(!s.drives[0].failed);
  }
}

TEST_CASE("reader: a record corrupted mid-run without a replica stops the next read naming the drive's file, the expert "
          "and its offset", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string single = b.place(1, "single.json");
  const PlacementManifest m = read_placement(single);
  const std::vector<int32_t> ids = test::read_golden(b.model).all();
  auto engine = open_rereading(b.model, single);
  engine->new_session()->append(ids, true);
  corrupt_drive(m, 0);
  CHECK_THROWS_WITH(engine->new_session()->append(ids, true),
                    Catch::StartsWith("drive 0 (" + m.drives[0] + "): ") && Catch::Contains(" (layer/expert) at offset ") &&
                        Catch::Contains(": checksum mismatch; no holder has a good copy (corrupt placement; run `deltafin verify`)"));
}

TEST_CASE("a placed expert holding NaN or Inf under a matching checksum is a bad copy on its drive, not the checkpoint's",
          "[placement][bad-input]") {
  // k3_tiny_mxfp4: an E8M0 scale of 255 (NaN); k2_tiny: a bf16 weight NaN. The copy and its
  // checksum were both rewritten (a checksum alone cannot tell), so the values decide.
  for (const char* fixture : {"k3_tiny_mxfp4", "k2_tiny"}) {
    INFO(fixture);
    Bench b(fixture);
    const std::string single = b.place(1, "single.json");
    PlacementManifest m = read_placement(single);
    const auto index = WeightIndex::open(b.model);
    const ExpertTable experts = load_expert_table(b.model, *index);
    std::string tensor;
    for (PlacedRecord& r : m.records) {
      const ExpertRef& ref = experts.at(r.layer, r.expert);
      const RecordLayout layout = record_layout(ref);
      const PlacementHolder& h = r.holders.front();
      std::string record = read_range(m.drives[h.drive], h.offset, r.payload);
      if (ref.proj[0].format == WeightFormat::MXFP4) {
        record[layout.offset[1]] = static_cast<char>(0xFF);
        tensor = ref.proj[0].scale.info->name;
      } else {
        REQUIRE(ref.proj[0].format == WeightFormat::BF16);
        record[layout.offset[0]] = static_cast<char>(0xC0), record[layout.offset[0] + 1] = 0x7F;
        tensor = ref.proj[0].weight.info->name;
      }
      write_range(m.drives[h.drive], h.offset, record);
      r.xxh3 = XXH3_64bits(record.data(), record.size());
    }
    std::ofstream(single, std::ios::trunc) << placement_json(m);
    std::string err;
    const auto r = run_stdout(greedy(b.model, " --placement " + single), &err);
    INFO(err);
    CHECK(r.exit_code == 1);
    CHECK(lines_with(err, "deltafin: drive 0 (" + m.drives[0] + "): expert ") == 1);
    CHECK(err.find(" at offset ") != std::string::npos);
    CHECK(err.find(": NaN or Inf in tensor '") != std::string::npos);
    CHECK(err.find("although the checksum matches") != std::string::npos);
    CHECK(err.find("no holder has a good copy") != std::string::npos);
    CHECK(err.find(".safetensors") == std::string::npos);  // not blamed on the checkpoint
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    // verify reads the same: the copy is bad although its checksum matches.
    const auto v = test::run_deltafin("verify -m " + b.model + " --placement " + single);
    INFO(v.output);
    CHECK(v.exit_code == 1);
    CHECK(v.output.find("drive 0 (" + m.drives[0] + "): expert ") != std::string::npos);
    CHECK(v.output.find("NaN or Inf in tensor '" + tensor + "' at element 0 although the checksum matches") != std::string::npos);
  }
}

TEST_CASE("place refuses an expert holding NaN or Inf, naming its shard and tensor", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const auto index = WeightIndex::open(b.model);
  const ExpertTable experts = load_expert_table(b.model, *index);
  const TensorRef& t = record_part_tensor(experts.at(1, 2), 2);  // the up projection's weight (bf16)
  const std::string shard = index->shard_path(t.shard);
  write_range(shard, t.info->offset + 2 * 5, std::string("\xC0\x7F", 2));
  const auto r = test::run_deltafin("place -m " + b.model + " --out " + b.path("p.json") + " --drive " + b.drive(0));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(r.output.find(shard + ": tensor '" + t.info->name + "' holds NaN or Inf at element 5") != std::string::npos);
  CHECK(!fs::exists(b.path("p.json")));
}

TEST_CASE("place refuses a bind-mounted second name of a drive directory before writing anything", "[placement][bad-input]") {
  Bench b("k2_tiny");
  const std::string d0 = b.drive(0), d1 = b.drive(1), out = b.path("p.json");
  test::CommandResult r;
  if (!run_in_mount_namespace("mount --bind " + d0 + " " + d1 + "\n" + test::binary() + " place -m " + b.model +
                                  " --out " + out + " --drive " + d0 + " --drive " + d1 + " 2>&1 || echo \"exit $?\"\n",
                              r))
    return;
  INFO(r.output);
  CHECK(r.output.find("exit 1") != std::string::npos);
  CHECK(lines_with(r.output, "deltafin: --drive " + d0 + " and --drive " + d1 +
                                 " are one directory (same device and inode: a bind mount or another name for it)") == 1);
  CHECK(files_in(d0) == 0);  // nothing written
  CHECK(!fs::exists(out));
}

TEST_CASE("place: after a full disk the same command runs again over its own leftovers, and drives sharing a filesystem are "
          "counted together", "[placement][bad-input]") {
  Bench b("k2_tiny");
  // The data file's size: a placement elsewhere.
  const PlacementManifest sized = read_placement(b.place(1, "sized.json"));
  const uint64_t data = fs::file_size(sized.drives[0]);
  const std::string fs_dir = b.path("fs"), out = b.path("p.json"), binary = test::binary();
  fs::create_directories(fs_dir);
  const uint64_t size = data + (1 << 20);  // room for one drive's data file, not for two
  const std::string script = fmt::format(
      "mount -t tmpfs -o size={size} tmpfs {fs}\n"
      "mkdir {fs}/d0 {fs}/d1\n"
      // Two drives on one filesystem that cannot hold both copies: refused before writing.
      "{bin} place -m {model} --out {out} --drive {fs}/d0 --drive {fs}/d1 --replicate 1 2>&1 || echo \"exit $?\"\n"
      "echo \"files after the refusal: $(find {fs}/d0 {fs}/d1 -type f | wc -l)\"\n"
      // One drive: placed; then its data file is made the leftover `.partial` of an interrupted
      // run (a full disk, a kill), and the disk filled so that only counting that file as ours
      // leaves room: the same command must run again.
      "{bin} place -m {model} --out {out} --drive {fs}/d0 >/dev/null\n"
      "for f in {fs}/d0/deltafin-experts-*.bin; do mv \"$f\" \"$f.partial\"; done\n"
      "rm {out}\n"
      "head -c {fill} /dev/zero > {fs}/filler\n"
      "{bin} place -m {model} --out {out} --drive {fs}/d0 2>&1 || echo \"exit $?\"\n"
      "echo \"partials left: $(find {fs}/d0 -name '*.partial' | wc -l)\"\n"
      "{bin} verify -m {model} --placement {out} 2>&1 || echo \"exit $?\"\n",
      fmt::arg("size", size), fmt::arg("fs", fs_dir), fmt::arg("bin", binary), fmt::arg("model", b.model),
      fmt::arg("out", out), fmt::arg("fill", size - data - 64 * 1024));
  test::CommandResult r;
  if (!run_in_mount_namespace(script, r)) return;
  INFO(r.output);
  CHECK(lines_with(r.output, "deltafin: drives 0 (" + fs_dir + "/d0), 1 (" + fs_dir + "/d1) are on one filesystem: together "
                             "they need") == 1);
  CHECK(r.output.find("files after the refusal: 0") != std::string::npos);
  CHECK(r.output.find("placed ") != std::string::npos);
  CHECK(r.output.find("partials left: 0") != std::string::npos);
  CHECK(r.output.find("all match") != std::string::npos);
  CHECK(lines_with(r.output, "exit ") == 1);  // only the refusal
}
