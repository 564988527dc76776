// Issue 34: the source tree is layered (docs/ARCHITECTURE.md, Layout), lowest first:
//   include/deltafin, kernels, src/util, src/weights, src/backend, src/io, src/model, src/hosts, src/text,
//   src/decode, src/serve, src/cli.
// A file includes only its own layer and lower ones. Every #include of include/, kernels/ and
// src/ is resolved as the compiler resolves it (the including file's directory, then include/,
// src/, kernels/; <...> only for <deltafin/...>) and checked; a failure names the file, the line
// and the include that runs upward.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kLayers = {"include", "kernels", "util",  "weights", "backend", "io",
                                          "model",   "hosts",   "text",  "decode",  "serve",   "cli"};

// The layer of a file (a path relative to the root): its rank in kLayers, -1 when it has none.
int layer_of(const fs::path& relative) {
  auto part = relative.begin();
  if (part == relative.end()) return -1;
  std::string name = part->string();
  if (name == "src") {
    if (++part == relative.end() || std::next(part) == relative.end()) return -1;  // a file directly in src/
    name = part->string();
  } else if (name != "include" && name != "kernels") {
    return -1;
  }
  const auto at = std::find(kLayers.begin(), kLayers.end(), name);
  return at == kLayers.end() ? -1 : static_cast<int>(at - kLayers.begin());
}

// The target of `#include "x"` or `#include <x>` on a line, or "" when the line includes nothing.
std::string included(const std::string& line, bool& quoted) {
  size_t at = line.find_first_not_of(" \t");
  if (at == std::string::npos || line[at] != '#') return "";
  at = line.find_first_not_of(" \t", at + 1);
  if (at == std::string::npos || line.compare(at, 7, "include") != 0) return "";
  at = line.find_first_not_of(" \t", at + 7);
  if (at == std::string::npos || (line[at] != '"' && line[at] != '<')) return "";
  quoted = line[at] == '"';
  const size_t end = line.find(quoted ? '"' : '>', at + 1);
  return end == std::string::npos ? "" : line.substr(at + 1, end - at - 1);
}

// Every include under root's include/, kernels/ and src/ that names a file of a higher layer, or
// that lies in or names a file in no layer: "file:line: #include "x" (layer a includes layer b)".
std::vector<std::string> layering_violations(const fs::path& root) {
  std::vector<std::string> out;
  for (const char* top : {"include", "kernels", "src"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (!entry.is_regular_file()) continue;
      const fs::path file = fs::relative(entry.path(), root);
      const int from = layer_of(file);
      if (from < 0) {
        out.push_back(file.string() + ": in no layer (add its directory to the order)");
        continue;
      }
      std::ifstream in(entry.path());
      std::string line;
      for (int number = 1; std::getline(in, line); ++number) {
        bool quoted = false;
        const std::string name = included(line, quoted);
        if (name.empty() || (!quoted && !name.starts_with("deltafin/"))) continue;  // system and library headers
        fs::path target;
        for (const fs::path& dir : {entry.path().parent_path(), root / "include", root / "src", root / "kernels"})
          if (fs::is_regular_file(dir / name)) {
            target = fs::relative(dir / name, root).lexically_normal();
            break;
          }
        const std::string where = file.string() + ":" + std::to_string(number) + ": #include " + (quoted ? "\"" : "<") +
                                  name + (quoted ? "\"" : ">");
        if (target.empty()) {
          out.push_back(where + " names no file of include/, src/ or kernels/");
          continue;
        }
        const int to = layer_of(target);
        if (to < 0) out.push_back(where + " names " + target.string() + ", in no layer");
        else if (to > from) out.push_back(where + " (" + kLayers[from] + " includes " + kLayers[to] + ", a higher layer)");
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("every #include of include/, kernels/ and src/ names its own layer or a lower one", "[layers]") {
  const fs::path root = fs::path(deltafin::test::fixtures_dir()).parent_path().parent_path();
  REQUIRE(fs::is_directory(root / "src" / "decode"));
  for (const std::string& violation : layering_violations(root)) FAIL_CHECK(violation);
}

TEST_CASE("the layering check names the file, the line and the include that runs upward", "[layers]") {
  const fs::path root = fs::temp_directory_path() / ("deltafin-layers-" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* dir : {"include/deltafin", "kernels/cpu", "src/model", "src/decode", "src/util", "src/extra"})
    fs::create_directories(root / dir);
  auto write = [&](const char* name, const std::string& text) { std::ofstream(root / name) << text; };
  write("include/deltafin/api.hpp", "#include <vector>\n");
  write("kernels/cpu/k.hpp", "#include \"util/u.hpp\"\n");
  write("src/util/u.hpp", "#include <deltafin/api.hpp>\n#include \"cpu/k.hpp\"\n");
  write("src/decode/d.hpp", "#include \"model/m.hpp\"\n");
  write("src/model/m.hpp", "// a model file\n#include \"u.hpp\"\n#  include \"decode/d.hpp\"\n#include \"util/u.hpp\"\n");
  write("src/model/u.hpp", "#include \"gone.hpp\"\n");
  write("src/extra/x.hpp", "\n");
  const std::vector<std::string> found = layering_violations(root);
  fs::remove_all(root);
  std::vector<std::string> want = {
      "kernels/cpu/k.hpp:1: #include \"util/u.hpp\" (kernels includes util, a higher layer)",
      "src/model/m.hpp:3: #include \"decode/d.hpp\" (model includes decode, a higher layer)",
      "src/model/u.hpp:1: #include \"gone.hpp\" names no file of include/, src/ or kernels/",
      "src/extra/x.hpp: in no layer (add its directory to the order)",
  };
  std::vector<std::string> sorted = found;
  std::sort(sorted.begin(), sorted.end());
  std::sort(want.begin(), want.end());
  CHECK(sorted == want);
}
