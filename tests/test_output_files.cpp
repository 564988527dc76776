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
