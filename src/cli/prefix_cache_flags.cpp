// The prefix cache's flags (see prefix_cache_flags.hpp).
#include "cli/prefix_cache_flags.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "util/error.hpp"

namespace deltafin::cli {

void add_prefix_cache_flags(CLI::App& app, PrefixCacheFlags& flags) {
  CLI::Option* dir = app.add_option("--prefix-cache", flags.dir,
                                    "Directory of the persistent prefix cache: the state after a prompt is saved there, and a "
                                    "later prompt starting with a saved one prefills only the rest (created when missing; "
                                    "shared safely by several processes)");
  app.add_option("--prefix-cache-gb", flags.gb,
                 "Disk budget of --prefix-cache in GB (every model's entries there; the least recently used go first)")
      ->capture_default_str()
      ->needs(dir);
}

void check_prefix_cache_flags(const PrefixCacheFlags& flags) {
  if (flags.dir.empty()) return;
  if (!(flags.gb > 0) || !std::isfinite(flags.gb) || flags.gb > 1e9)
    fail("--prefix-cache-gb: must be a positive number of GB (got {})", flags.gb);
  std::error_code ec;
  const auto status = std::filesystem::status(flags.dir, ec);
  if (std::filesystem::exists(status) && !std::filesystem::is_directory(status))
    fail("--prefix-cache {}: not a directory", flags.dir);
  if (!std::filesystem::exists(status)) {
    std::filesystem::create_directories(flags.dir, ec);
    if (ec) fail("--prefix-cache {}: cannot create the directory: {}", flags.dir, ec.message());
  }
  if (::access(flags.dir.c_str(), W_OK | X_OK) != 0)
    fail("--prefix-cache {}: not writable: {}", flags.dir, std::strerror(errno));
}

std::unique_ptr<PrefixCache> open_prefix_cache(const PrefixCacheFlags& flags, Engine& engine) {
  if (flags.dir.empty()) return nullptr;
  try {
    return std::make_unique<PrefixCache>(flags.dir, flags.gb, engine);
  } catch (const Error& e) {
    fail("--prefix-cache: {}", e.what());  // the store's messages name the directory
  }
}

}  // namespace deltafin::cli
