// --prefix-cache DIR [--prefix-cache-gb G], the persistent prefix cache's flags (run and serve;
// decode/prefix_cache.hpp): checked before an engine opens, so a bad directory fails at once in
// one line naming the flag and the path.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include <deltafin/engine.hpp>

#include "decode/prefix_cache.hpp"

namespace deltafin::cli {

struct PrefixCacheFlags {
  std::string dir;                          // "": no prefix cache
  double gb = PrefixCache::kDefaultGb;      // the directory's budget (every model's entries)
};

void add_prefix_cache_flags(CLI::App& app, PrefixCacheFlags& flags);
// Throws deltafin::Error naming the flag: a budget that is not a positive number, a DIR that is
// a file or cannot be created or written. Creates DIR when missing; nothing in it but the
// cache's own entries (*.dpc) and their temporaries is ever changed.
void check_prefix_cache_flags(const PrefixCacheFlags& flags);
// The cache the flags ask for over `engine` (nullptr: no --prefix-cache).
std::unique_ptr<PrefixCache> open_prefix_cache(const PrefixCacheFlags& flags, Engine& engine);

}  // namespace deltafin::cli
