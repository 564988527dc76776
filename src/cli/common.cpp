// Flags and output shared by the subcommands.
#include <cinttypes>
#include <cstdlib>
#include <filesystem>
#include <cstdio>

#include <xxhash.h>

#include "cli/commands.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"

namespace deltafin::cli {

namespace {

// The directory of the running binary (for locating the bundled model next to a build).
std::filesystem::path executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}

}  // namespace

std::string model_dir_or_default(const std::string& given) {
  if (!given.empty()) return given;
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("DELTAFIN_MODEL")) candidates.emplace_back(env);
  const std::filesystem::path exe = executable_dir();
  if (!exe.empty()) {
    candidates.push_back(exe / ".." / kBundledModel);  // build/deltafin -> models/default
    candidates.push_back(exe / kBundledModel);
  }
  candidates.push_back(kBundledModel);
  for (const auto& dir : candidates)
    if (std::filesystem::exists(dir / "config.json")) return std::filesystem::weakly_canonical(dir).string();
  fail("-m: no model directory given and no bundled model found ({} next to the binary or here; "
       "DELTAFIN_MODEL overrides)", kBundledModel);
}

void add_engine_flags(CLI::App& app, EngineOptions& options) {
  app.add_option("-m,--model", options.model_dir, "Model directory (default: the bundled models/default)");
  app.add_option("--cache-gb", options.cache_gb, "Byte budget of the routed-expert cache, in GB")->capture_default_str();
  app.add_option("--threads", options.threads, "Worker threads (0: one per hardware thread)")->capture_default_str();
  app.add_option("--chunk", options.chunk, "Positions per prefill pass")->capture_default_str();
  app.add_flag("--no-bypass{false}", options.bypass, "Read routed experts through the page cache (default: bypass it)");
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

void print_receipt(const Engine& engine, double prefill_seconds, int64_t prefill_tokens, double decode_seconds,
                   int64_t decode_tokens, const std::vector<int32_t>& generated) {
  const EngineStats s = engine.stats();
  const double gb = 1e9;
  const uint64_t lookups = s.expert_hits + s.expert_misses;
  std::fprintf(stderr, "--- deltafin receipt ---\n");
  std::fprintf(stderr, "model     %s\n", engine.summary().architecture.c_str());
  std::fprintf(stderr, "prefill   %" PRId64 " tokens in %.3f s (%.2f tok/s)\n", prefill_tokens, prefill_seconds,
               prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0.0);
  std::fprintf(stderr, "decode    %" PRId64 " tokens in %.3f s (%.2f tok/s)\n", decode_tokens, decode_seconds,
               decode_seconds > 0 ? decode_tokens / decode_seconds : 0.0);
  std::fprintf(stderr, "experts   %.4f GB read, %" PRIu64 " runs for %" PRIu64 " selections, cache hit rate %.1f%%\n",
               s.expert_bytes_read / gb, s.expert_runs, s.expert_selections,
               lookups ? 100.0 * s.expert_hits / lookups : 0.0);
  std::fprintf(stderr, "memory    peak RSS %.4f GB = spine %.4f GB + expert cache peak %.4f GB (budget %.4f GB) + rest\n",
               peak_rss_bytes() / gb, engine.summary().spine_bytes / gb, s.peak_cache_bytes / gb,
               s.cache_budget_bytes / gb);
  const uint64_t hash = XXH3_64bits(generated.data(), generated.size() * sizeof(int32_t));
  std::fprintf(stderr, "ids hash  xxh3:%016" PRIx64 " (%zu ids)\n", hash, generated.size());
}

}  // namespace deltafin::cli
