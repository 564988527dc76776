// Process memory figures for receipts.
#pragma once

#include <sys/resource.h>

#include <cstdint>

namespace deltafin {

// Peak resident set size of this process, in bytes.
inline uint64_t peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
#ifdef __APPLE__
  return static_cast<uint64_t>(usage.ru_maxrss);  // macOS reports bytes
#else
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
#endif
}

}  // namespace deltafin
