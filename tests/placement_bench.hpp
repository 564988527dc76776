// Helpers of the placement tests: a scratch copy of a fixture model with drive directories, a
// greedy run's command line, a run's stdout apart from its stderr, and flipping a byte of a file.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "test_util.hpp"

namespace deltafin::test {

namespace fs = std::filesystem;

// A scratch directory with a copy of a fixture model ("model/") and drive directories d0, d1, ...
struct Bench {
  fs::path root;
  std::string model;
  explicit Bench(const std::string& fixture_name) {
    root = fs::temp_directory_path() / ("deltafin-place-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::remove_all(root);
    fs::create_directories(root);
    fs::copy(fixture(fixture_name), root / "model");
    model = (root / "model").string();
  }
  ~Bench() { fs::remove_all(root); }
  std::string drive(int i) const {
    const fs::path dir = root / std::string("d").append(std::to_string(i));  // not "d" + string&&: GCC 12's -Wrestrict
    fs::create_directories(dir);
    return dir.string();
  }
  std::string path(const std::string& name) const { return (root / name).string(); }
  // `deltafin place` onto drives 0..n-1 with a manifest `name`; returns the manifest path.
  std::string place(int drives, const std::string& name, const std::string& extra = "") const {
    std::string args = "place -m " + model + " --out " + path(name) + extra;
    for (int d = 0; d < drives; ++d) args += " --drive " + drive(d);
    const auto r = deltafin::test::run_deltafin(args);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return path(name);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// stdout only (stderr to a file), so warnings do not mix with the ids.
inline CommandResult run_stdout(const std::string& args, std::string* err = nullptr) {
  const std::string err_path = (fs::temp_directory_path() / ("deltafin-err-" + std::to_string(::getpid()))).string();
  CommandResult r;
  FILE* pipe = popen((binary() + " " + args + " 2>" + err_path).c_str(), "r");
  REQUIRE(pipe);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_path);
  std::stringstream s;
  s << in.rdbuf();
  if (err) *err = s.str();
  fs::remove(err_path);
  return r;
}

inline std::string greedy(const std::string& model, const std::string& extra) {
  const std::string prompt = join_ids(read_golden(model).prompt, ",");
  return fmt::format("run -m {} --tokens {} -n 24 --temp 0 --ids --ignore-eos{}", model, prompt, extra);
}

inline void flip_byte(const std::string& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Lines of `text` that contain `part`.
inline size_t lines_with(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    n += text.substr(begin, end - begin).find(part) != std::string::npos;
    begin = end + 1;
  }
  return n;
}

}  // namespace deltafin::test
