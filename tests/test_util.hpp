// Helpers shared by the tests: fixture paths, golden.json, running the deltafin binary.
#pragma once

#include <simdjson.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/simd_target.hpp"

namespace deltafin::test {

// The SIMD targets per-target tests run: DELTAFIN_SIMD's alone when it is set, else every target
// this build has and this CPU runs.
inline std::vector<std::string> simd_targets_under_test() {
  const char* forced = std::getenv("DELTAFIN_SIMD");
  if (forced != nullptr && *forced != '\0') return {forced};
  return cpu::simd_available();
}

// Runs body(target) once per SIMD target with the kernels dispatched to it (and the deltafin
// binary too, see run_deltafin); failures name the target.
template <class Body>
void for_each_simd_target(Body&& body) {
  for (const std::string& target : simd_targets_under_test()) {
    cpu::SimdScope scope(target);
    INFO("SIMD target " << target);
    body(target);
  }
}

// The device backends this build has and this machine runs: CUDA when compiled in with a device
// present (the GPU machine), Metal on a Mac, none in CI.
inline std::vector<std::string> device_backends() {
  std::vector<std::string> names;
  if (cuda_device_present()) names.push_back("cuda");
  if (metal_device_present()) names.push_back("metal");
  return names;
}

inline std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  if (name == "metal") return make_metal_backend();
  return name == "cuda" ? make_cuda_backend() : make_cpu_backend(threads);
}

// Runs body(backend name): "cpu" once per SIMD target, then each device backend once.
template <class Body>
void for_each_backend_and_target(Body&& body) {
  for_each_simd_target([&](const std::string&) { body(std::string("cpu")); });
  for (const std::string& name : device_backends()) {
    INFO("backend " << name);
    body(name);
  }
}

// The fixtures directory and the deltafin binary: where this build put them, unless
// DELTAFIN_TEST_FIXTURES / DELTAFIN_TEST_BINARY say otherwise (a build carried to another machine).
inline const std::string& fixtures_dir() {
  static const std::string dir = std::getenv("DELTAFIN_TEST_FIXTURES") ? std::getenv("DELTAFIN_TEST_FIXTURES") : DELTAFIN_FIXTURES;
  return dir;
}
inline const std::string& binary() {
  static const std::string bin = std::getenv("DELTAFIN_TEST_BINARY") ? std::getenv("DELTAFIN_TEST_BINARY") : DELTAFIN_BINARY;
  return bin;
}

inline std::string fixture(const std::string& name) { return fixtures_dir() + "/" + name; }

struct Golden {
  std::vector<int32_t> prompt, generated;
  std::vector<int32_t> all() const {
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), generated.begin(), generated.end());
    return ids;
  }
};

inline Golden read_golden(const std::string& dir) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load(dir + "/golden.json");
  Golden g;
  for (int64_t v : root["prompt"].get_array()) g.prompt.push_back(static_cast<int32_t>(v));
  for (int64_t v : root["generated"].get_array()) g.generated.push_back(static_cast<int32_t>(v));
  return g;
}

// max_j |a[j] - ref[j]| / max_j |ref[j]| over one row of n values (the golden tests' criterion).
// A CHECK that `part` occurs in `text`, naming the part when it fails.
inline void check_contains(const std::string& text, const std::string& part) {
  INFO(part);
  CHECK(text.find(part) != std::string::npos);
}

inline double relative_error(const float* a, const float* ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t j = 0; j < n; ++j) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[j] - ref[j])));
    scale = std::max(scale, static_cast<double>(std::fabs(ref[j])));
  }
  return diff / scale;
}

inline std::string join_ids(const std::vector<int32_t>& ids, const char* sep) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(ids[i]);
  }
  return out;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing stdout + stderr.
inline CommandResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs `deltafin <args>`, capturing stdout + stderr, on the SIMD target the test process
// dispatches to.
inline CommandResult run_deltafin(const std::string& args) {
  return run_command("DELTAFIN_SIMD=" + cpu::simd_current() + " " + binary() + " " + args);
}

// A private copy of a fixture directory that a test may damage; removed afterwards.
struct ScratchModel {
  std::filesystem::path dir;
  explicit ScratchModel(const std::string& fixture) {
    dir = std::filesystem::temp_directory_path() /
          ("deltafin-bad-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::remove_all(dir);
    std::filesystem::copy(test::fixture(fixture), dir);
  }
  ~ScratchModel() { std::filesystem::remove_all(dir); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(dir / name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << bytes;
  }
  // Replaces the first occurrence of `from` by `to` (same length) in a file.
  void patch(const std::string& name, const std::string& from, const std::string& to) const {
    REQUIRE(from.size() == to.size());
    std::string bytes = read(name);
    const size_t at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    bytes.replace(at, from.size(), to);
    write(name, bytes);
  }
  // Sets the first `"key": value` of config.json to `value` (JSON text).
  void set_config(const std::string& key, const std::string& value) const {
    std::string config = read("config.json");
    const size_t at = config.find("\"" + key + "\"");
    REQUIRE(at != std::string::npos);
    const size_t begin = config.find(':', at) + 1, end = config.find_first_of(",}", begin);
    config.replace(begin, end - begin, " " + value);
    write("config.json", config);
  }
  // Replaces every occurrence of `from` by `to` (same length) in a file.
  void patch_all(const std::string& name, const std::string& from, const std::string& to) const {
    std::string bytes = read(name);
    for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at + to.size()))
      bytes.replace(at, from.size(), to);
    write(name, bytes);
  }
};

// `deltafin logits` over a damaged model must fail with one line "deltafin: ..." containing every
// string of `must_contain`, exit code 1, and no output file.
inline void expect_model_error(const ScratchModel& m, const std::vector<std::string>& must_contain) {
  const auto r = run_deltafin("logits -m " + m.dir.string() + " --tokens 1,2,3 --out " + (m.dir / "out.npy").string());
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("deltafin: ", 0) == 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  for (const std::string& s : must_contain) CHECK(r.output.find(s) != std::string::npos);
  CHECK(!std::filesystem::exists(m.dir / "out.npy"));
}

// Pearson's chi-square of `counts` (draws in all) against probabilities p; a token drawn where p
// is 0 fails the test.
inline double chi_square(const std::vector<uint64_t>& counts, const std::vector<double>& p, uint64_t draws) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      REQUIRE(counts[i] == 0);  // never drawn where the target puts no mass
      continue;
    }
    const double expected = p[i] * static_cast<double>(draws);
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi;
}

// Upper 0.1% point of chi-square with df degrees of freedom (Wilson-Hilferty).
inline double chi_square_limit(int df) {
  const double z = 3.090, h = 2.0 / (9.0 * df);
  return df * std::pow(1 - h + z * std::sqrt(h), 3);
}

}  // namespace deltafin::test
