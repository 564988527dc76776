// meet_hosts and build_version (see handshake.hpp).
#include "hosts/handshake.hpp"

#include <fmt/format.h>

#include <chrono>

#include "util/error.hpp"

namespace deltafin::hosts {

// DELTAFIN_VERSION_TEXT and DELTAFIN_COMMIT come from CMake (this file only; see CMakeLists.txt).
std::string build_version() { return fmt::format("{} deltafin {} commit {}", kWireVersion, DELTAFIN_VERSION_TEXT, DELTAFIN_COMMIT); }

std::string host_label(const std::string& name, int rank) { return fmt::format("host {} (rank {})", name, rank); }

std::vector<Hello> meet_hosts(HostGroup& group, const Hello& mine, double timeout) {
  const int n = group.size();
  std::vector<Hello> hellos(n);
  std::vector<bool> seen(n, false);
  hellos[0] = mine, seen[0] = true;
  const auto start = std::chrono::steady_clock::now();
  for (int got = 1; got < n; ++got) {
    const double left = timeout - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto r = group.receive(-1, std::max(left, 0.0));
    if (!r) {
      int missing = 1;
      while (seen[missing]) ++missing;
      fail("rank {} did not report within {} s of the start (--host-timeout): it hangs, or opening its experts takes longer",
           missing, timeout);
    }
    Message m = decode(r->bytes, r->from);
    const int rank = r->from;
    if (const auto* failure = std::get_if<Failure>(&m)) fail("rank {}: {}", rank, failure->message);
    auto* h = std::get_if<Hello>(&m);
    if (!h || seen[rank]) fail("rank {} sent something else than its Hello at the start", rank);
    const std::string who = host_label(h->host, rank);
    if (h->version != mine.version)
      fail("{} runs another deltafin build ({}) than rank 0 ({}); build the same commit on every host", who, h->version,
           mine.version);
    if (!h->error.empty()) fail("{}: {}", who, h->error);
    if (h->model != mine.model)
      fail("{} opened another model (experts {}) than rank 0 (experts {}); give every host the same model", who, h->model,
           mine.model);
    if (h->placement != mine.placement)
      fail("{} reads its experts from another placement ({}) than rank 0 ({}); copy the same manifest to every host", who,
           h->placement, mine.placement);
    if (h->backend != mine.backend)
      fail("{} runs another backend ({}) than rank 0 ({}): its results would differ in the last bits; use the same "
           "backend and SIMD target on every host (DELTAFIN_SIMD)",
           who, h->backend, mine.backend);
    hellos[rank] = std::move(*h);
    seen[rank] = true;
  }
  return hellos;
}

}  // namespace deltafin::hosts
