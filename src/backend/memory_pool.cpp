// host_memory_pool (backend.hpp): the host's memory as a backend's pool.
#include <unistd.h>

#include "backend/backend.hpp"
#include "util/memory_available.hpp"

namespace deltafin {

MemoryPool host_memory_pool(const char* name) {
  MemoryPool pool;
  pool.name = name;
  pool.host_visible = true;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) pool.size = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  if (const auto avail = memory_available()) pool.free = avail->bytes;
  return pool;
}

}  // namespace deltafin
