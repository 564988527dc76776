// Output files the user names (issue 12, item 1): devices, FIFOs and symlinks are written to, never
// replaced; "-" is stdout; a wrong directory fails before the run; no temporary is left behind.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.hpp"

namespace fs = std::filesystem;
using deltafin::test::run_command;
using deltafin::test::run_deltafin;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("deltafin-out-" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path), fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(path), fs::directory_iterator())); }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::string kModel = deltafin::test::fixture("k2_tiny");

}  // namespace

TEST_CASE("logits --out /dev/stdout writes into the pipe and leaves /dev/stdout alone", "[bad-input]") {
  const auto r = run_command("bash -c '" + deltafin::test::binary() + " logits -m " + kModel +
                             " --tokens 1,2 --out /dev/stdout | head -c 6 | od -An -c'");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("N   U   M   P   Y") != std::string::npos);
  CHECK(fs::is_symlink("/dev/stdout"));
  const auto dash = run_command("bash -c '" + deltafin::test::binary() + " logits -m " + kModel +
                                " --tokens 1,2 --out - | head -c 6 | od -An -c'");
  CHECK(dash.output.find("N   U   M   P   Y") != std::string::npos);
}

TEST_CASE("a stats file of /dev/null leaves /dev/null a device", "[bad-input]") {
  const auto r = run_deltafin("run -m " + kModel + " --tokens 1,2 -n 2 --ids --stats-json /dev/null");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  struct stat st {};
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
}

TEST_CASE("an output through a symlink lands in its target, and the link stays", "[bad-input]") {
  TempDir dir;
  fs::create_directories(dir.path / "real");
  fs::create_symlink(dir.path / "real" / "stats.json", dir.path / "link.json");
  const auto r = run_deltafin("run -m " + kModel + " --tokens 1,2 -n 2 --ids --stats-json " + (dir.path / "link.json").string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(fs::is_symlink(dir.path / "link.json"));
  CHECK(slurp(dir.path / "real" / "stats.json").find("\"ids_xxh3\"") != std::string::npos);
  CHECK(dir.entries() == 2);  // the link and real/: no temporary left
  CHECK(std::distance(fs::directory_iterator(dir.path / "real"), fs::directory_iterator()) == 1);
}

TEST_CASE("an output in a missing directory fails before the run", "[bad-input]") {
  const auto r = run_deltafin("run -m " + kModel + " --tokens 1,2 -n 2 --ids --stats-json /nonexistent-dir/s.json");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("deltafin: /nonexistent-dir/s.json: cannot write in /nonexistent-dir", 0) == 0);  // no ids printed first
  const auto l = run_deltafin("logits -m " + kModel + " --tokens 1 --out /nonexistent-dir/x.npy");
  CHECK(l.exit_code == 1);
  CHECK(l.output.find("/nonexistent-dir/x.npy") != std::string::npos);
}

TEST_CASE("a write that fails on a full device is one line, exit 1", "[bad-input]") {
  const auto r = run_deltafin("logits -m " + kModel + " --tokens 1,2 --out /dev/full");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("/dev/full: write failed: No space left on device") != std::string::npos);
}

// Issue 33, item 9: the temporary of a writer killed before it could remove it (SIGTERM, an
// unhandled Ctrl-C, kill -9) is removed by the next output written in that directory; a
// temporary whose writer still runs, and every file that is not an OutputFile temporary, stay.
TEST_CASE("temporaries of killed writers are removed by the next run, live ones and the user's files stay", "[bad-input]") {
  TempDir dir;
  const fs::path stats = dir.path / "stats.json";
  for (const char* signal : {"TERM", "KILL"}) {
    INFO(signal);
    // A run that lasts (its ids go into a pipe nobody reads), killed once its temporary exists.
    const auto killed = run_command(
        "sh -c 'mkfifo " + (dir.path / "ids").string() + "; sleep 60 < " + (dir.path / "ids").string() + " & reader=$!; " +
        deltafin::test::binary() + " run -m " + kModel + " --tokens 1,2 -n 100000 --past-context --ids --ignore-eos " +
        "--stats-json " + stats.string() + " > " + (dir.path / "ids").string() + " & pid=$!; " +
        "i=0; while [ $i -lt 1000 ] && ! ls -A " + dir.path.string() + " | grep -q deltafin-tmp; do sleep 0.01; i=$((i+1)); done; " +
        "kill -" + signal + " $pid; wait $pid; echo \"status $?\"; kill $reader; rm " + (dir.path / "ids").string() + "'");
    INFO(killed.output);
    REQUIRE(killed.output.find(std::string("status ") + (std::string(signal) == "KILL" ? "137" : "143")) != std::string::npos);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir.path)) left.push_back(e.path().filename().string());
    REQUIRE(left.size() == 1);  // the killed run's empty temporary
    CHECK(left[0].rfind(".stats.json.deltafin-tmp-", 0) == 0);
    CHECK(fs::file_size(dir.path / left[0]) == 0);
    const auto again = run_deltafin("run -m " + kModel + " --tokens 1,2 -n 2 --ids --stats-json " + stats.string());
    CHECK(again.exit_code == 0);
    CHECK(!fs::exists(dir.path / left[0]));
    CHECK(dir.entries() == 1);  // stats.json alone
    fs::remove(stats);
  }
  // A temporary of another output in the same directory, a user's files that look alike, and the
  // temporary of a writer that still runs (its lock held by flock(1) around the run).
  const std::vector<std::string> stale = {".other.npy.deltafin-tmp-a1B2c3", ".stats.json.deltafin-tmp-XyZ789"};
  const std::vector<std::string> kept = {".stats.json.deltafin-tmp-live01", ".stats.json.keep", "stats.json.deltafin-tmp-abcdef",
                                         ".stats.json.deltafin-tmp-toolong1", ".stats.json.XXXXXX"};
  for (const auto& name : stale) std::ofstream(dir.path / name) << "";
  for (const auto& name : kept) std::ofstream(dir.path / name) << "user";
  std::ofstream(dir.path / kept[0], std::ios::trunc) << "";
  const auto r = run_command("flock " + (dir.path / kept[0]).string() + " " + deltafin::test::binary() + " run -m " + kModel +
                             " --tokens 1,2 -n 2 --ids --stats-json " + stats.string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const auto& name : stale) CHECK(!fs::exists(dir.path / name));
  for (const auto& name : kept) CHECK(fs::exists(dir.path / name));
  CHECK(fs::exists(stats));
}
