// Flags and output shared by the subcommands.
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <cstdio>

#include "hosts/host_group.hpp"
#include "cli/commands.hpp"
#include "util/error.hpp"

#ifdef __APPLE__
#include <mach-o/dyld.h>  // _NSGetExecutablePath
#endif

namespace deltafin::cli {

namespace {

// The directory of the running binary (for locating the bundled model next to a build):
// /proc/self/exe on Linux, _NSGetExecutablePath on macOS (which has no /proc).
std::filesystem::path executable_dir() {
  std::error_code ec;
#ifdef __APPLE__
  char path[4096];
  uint32_t size = sizeof(path);
  if (_NSGetExecutablePath(path, &size) != 0) return {};
  const std::filesystem::path exe = std::filesystem::weakly_canonical(path, ec);
#else
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
#endif
  return ec ? std::filesystem::path() : exe.parent_path();
}

}  // namespace

void check_stdout() {
  if (std::ferror(stdout)) fail("stdout: {}", std::strerror(errno != 0 ? errno : EIO));
}

std::string model_dir_or_default(const std::string& given) {
  if (!given.empty()) {
    std::error_code ec;
    const auto status = std::filesystem::status(given, ec);
    if (!std::filesystem::exists(status)) fail("-m {}: no such directory", given);
    if (!std::filesystem::is_directory(status)) fail("-m {}: not a directory (a model is a directory with config.json)", given);
    return given;
  }
  if (const char* env = std::getenv("DELTAFIN_MODEL"); env && *env) {  // asked for by name: never replaced
    std::error_code ec;
    if (!std::filesystem::is_directory(env, ec)) fail("DELTAFIN_MODEL={}: no such directory", env);
    if (!std::filesystem::exists(std::filesystem::path(env) / "config.json", ec))
      fail("DELTAFIN_MODEL={}: not a model directory (no config.json there)", env);
    return std::filesystem::weakly_canonical(env, ec).string();
  }
  std::vector<std::filesystem::path> candidates;
  const std::filesystem::path exe = executable_dir();
  if (!exe.empty()) {
    candidates.push_back(exe / ".." / kBundledModel);  // build/deltafin -> models/default
    candidates.push_back(exe / kBundledModel);
  }
  candidates.push_back(kBundledModel);
  for (const auto& dir : candidates)
    if (std::filesystem::exists(dir / "config.json")) return std::filesystem::weakly_canonical(dir).string();
  fail("-m: no model directory given and no bundled model found ({} next to the binary or its build "
       "directory, or in the current directory; DELTAFIN_MODEL overrides)", kBundledModel);
}

bool expert_host_rank() { return hosts::host_group() && hosts::host_group()->rank() > 0; }

CLI::Validator chunk_validator() {
  return CLI::Validator(
      [](std::string& s) {
        try {
          size_t end = 0;
          const long long v = std::stoll(s, &end);
          if (end == s.size() && v >= 1) return std::string();
        } catch (...) {
        }
        return std::string("must be a whole number of positions >= 1 (got '" + s + "')");
      },
      "", "");
}

void add_engine_flags(CLI::App& app, EngineOptions& options) {
  app.add_option("-m,--model", options.model_dir, "Model directory (default: the bundled models/default)");
  app.add_option("--memory-gb", options.memory_gb,
                 "The one memory budget in GB: spine, expert cache, KV cache and state, draft model, working memory "
                 "(default: the machine's free memory and cgroup room, less 5% headroom and at least 256 MB); a spine that does not fit streams. "
                 "With a GPU of its own memory (CUDA) this is the host's budget: the spine units the device streams are held here where they fit");
  app.add_option("--device-memory-gb", options.device_memory_gb,
                 "The device's budget in GB where it has memory of its own (CUDA): resident spine, the window streamed units pass "
                 "through, expert cache, KV cache and state, working memory (default: the device's free memory less 2% of its "
                 "size, at least 512 MB). On the CPU and Metal there is one pool, so this is --memory-gb's budget");
  app.add_option_function<double>(
      "--cache-gb", [&options](double gb) { options.cache_gb = gb, options.cache_gb_given = true; },
      "The routed-expert share of --memory-gb, in GB (default: what the budget leaves once the spine is placed)");
  app.add_option("--threads", options.threads, "Worker threads (0: one per CPU this process may use: its affinity mask and CPU quota)")->capture_default_str();
  app.add_option("--chunk", options.chunk,
                 "The most positions a prefill pass takes (default: as many as the memory plan gives, up to the whole prompt)")
      ->type_name("N")
      ->check(chunk_validator());
  app.add_option("--backend", options.backend, "What runs the model: cpu, cuda, metal, or auto (CUDA or Metal when a device is present)")
      ->capture_default_str();
  app.add_flag_callback("--no-bypass", [&options] { options.bypass = false; },
                        "Read routed experts through the page cache (default: bypass it)");
  app.add_option("--placement", options.placement,
                 "Placement manifest from `deltafin place` (default: deltafin-placement.json in the model directory "
                 "when present; 'none': read the original shards)");
  app.add_flag("--lookahead", options.lookahead,
               "Prefetch the next layer's likely experts (router lookahead; turns itself off while it misses)");
  app.add_option("--io-depth", options.io_depth, "Reads in flight per drive")->capture_default_str();
  app.add_option("--host-timeout", options.host_timeout,
                 "Under mpirun: seconds rank 0 waits for another host's answer before it ends the run naming that host")
      ->capture_default_str();
  app.add_option("--io-piece-mb", options.io_piece_mb, "Expert records are read in concurrent pieces of this size (MB)")
      ->capture_default_str();
}

std::vector<int32_t> parse_token_list(const std::string& text, const char* flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno || v < 0 || v > INT32_MAX)
      fail("{}: '{}' is not a token id (expected a comma-separated list like 1,17,300)", flag, item);
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  return ids;
}

}  // namespace deltafin::cli
