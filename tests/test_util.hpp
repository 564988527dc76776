// Helpers shared by the tests: fixture paths, golden.json, running the deltafin binary.
#pragma once

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace deltafin::test {

inline std::string fixture(const std::string& name) { return std::string(DELTAFIN_FIXTURES) + "/" + name; }

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

inline std::string join_ids(const std::vector<int32_t>& ids, const char* sep) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? sep : "") + std::to_string(ids[i]);
  return out;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `deltafin <args>` through the shell, capturing stdout + stderr.
inline CommandResult run_deltafin(const std::string& args) {
  const std::string cmd = std::string(DELTAFIN_BINARY) + " " + args + " 2>&1";
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

}  // namespace deltafin::test
