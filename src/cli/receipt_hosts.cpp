// The receipt's lines for a run on several hosts (mpirun): one per host, rank 0 first, with the
// expert bytes it read and at what rate (over its busiest drive's busy time), its cache hits, the
// time it spent running rank 0's requests (and of that, waiting for reads), and the network's
// share: rank 0's round trips to it less its busy time. Also their JSON (--stats-json "hosts").
#include "cli/receipt_format.hpp"
#include "util/json_string.hpp"

namespace deltafin::cli {
namespace {

double network_seconds(const HostReport& h) { return std::max(0.0, h.round_trip_seconds - h.busy_seconds); }

std::string host_line(const HostReport& h) {
  std::string text = fmt::format("{} expert runs, {} read", h.expert_runs, human_bytes(h.expert_bytes_read));
  if (h.drive_busy_seconds > 0) text += " at " + human_byte_rate(h.expert_bytes_read / h.drive_busy_seconds);
  if (h.hits + h.misses > 0) text += fmt::format(", {:.0f}% cache hits", 100.0 * h.hits / (h.hits + h.misses));
  if (h.rank == 0) return text + fmt::format(", waited {} for reads", human_seconds(h.io_wait_seconds));
  text += fmt::format(", busy {} ({} waiting for reads)", human_seconds(h.busy_seconds), human_seconds(h.io_wait_seconds));
  if (h.round_trips > 0)
    text += fmt::format("; network {} over {} round trips ({} to it, {} back); rank 0 waited {} for it",
                        human_seconds(network_seconds(h)), h.round_trips, human_bytes(h.bytes_to), human_bytes(h.bytes_from),
                        human_seconds(h.stall_seconds));
  return text;
}

}  // namespace

void print_hosts(const EngineStats& s) {
  if (s.hosts.empty()) return;
  std::fprintf(stderr, "hosts     %zu (mpirun); the experts of each pass are run where they are read\n", s.hosts.size());
  for (const HostReport& h : s.hosts)
    std::fprintf(stderr, "  host %s (rank %d): %s\n", h.name.c_str(), h.rank, host_line(h).c_str());
}

std::string hosts_json(const EngineStats& s) {
  std::string out;
  for (const HostReport& h : s.hosts)
    out += fmt::format(
        "{}\n    {{\"rank\": {}, \"name\": {}, \"expert_runs\": {}, \"expert_bytes_read\": {}, \"hits\": {}, \"misses\": {}, "
        "\"cache_budget\": {}, \"busy_seconds\": {:.6f}, \"io_wait_seconds\": {:.6f}, \"drive_busy_seconds\": {:.6f}, "
        "\"round_trips\": {}, \"round_trip_seconds\": {:.6f}, \"network_seconds\": {:.6f}, \"stall_seconds\": {:.6f}, "
        "\"bytes_to\": {}, \"bytes_from\": {}}}",
        out.empty() ? "" : ",", h.rank, json_string(h.name), h.expert_runs, h.expert_bytes_read, h.hits, h.misses,
        h.cache_budget_bytes, h.busy_seconds, h.io_wait_seconds, h.drive_busy_seconds, h.round_trips, h.round_trip_seconds,
        network_seconds(h), h.stall_seconds, h.bytes_to, h.bytes_from);
  return out;
}

}  // namespace deltafin::cli
