// The receipt's lines for a run on several hosts (mpirun): one per host, rank 0 first, with the
// expert bytes it read and at what rate (over its busiest drive's busy time), its cache hits, the
// time it spent running rank 0's requests (and of that, waiting for reads), and rank 0's wait for
// it with the network's part of that wait (hosts/host_experts.hpp). Also their JSON
// (--stats-json "hosts", with the decode's own expert bytes, network, wait, round trips and bytes).
#include "cli/receipt_format.hpp"
#include "util/json_string.hpp"

namespace deltafin::cli {
namespace {

std::string host_line(const HostReport& h) {
  std::string text = fmt::format("{} expert runs, {} read", h.expert_runs, human_bytes(h.expert_bytes_read));
  if (h.drive_busy_seconds > 0) text += " at " + human_byte_rate(h.expert_bytes_read / h.drive_busy_seconds);
  if (h.hits + h.misses > 0) text += fmt::format(", {:.0f}% cache hits", 100.0 * h.hits / (h.hits + h.misses));
  if (h.rank == 0) return text + fmt::format(", waited {} for reads", human_seconds(h.io_wait_seconds));
  text += fmt::format(", busy {} ({} waiting for reads)", human_seconds(h.busy_seconds), human_seconds(h.io_wait_seconds));
  if (h.round_trips > 0)
    text += fmt::format("; {} round trips ({} to it, {} back); rank 0 waited {} for it, {} of that the network's",
                        h.round_trips, human_bytes(h.bytes_to), human_bytes(h.bytes_from), human_seconds(h.stall_seconds),
                        human_seconds(h.network_seconds));
  return text;
}

}  // namespace

void print_hosts(const EngineStats& s) {
  if (s.hosts.empty()) return;
  std::fprintf(stderr, "hosts     %zu (mpirun); the experts of each pass are run where they are read\n", s.hosts.size());
  for (const HostReport& h : s.hosts)
    std::fprintf(stderr, "  host %s (rank %d): %s\n", h.name.c_str(), h.rank, host_line(h).c_str());
}

std::string hosts_json(const EngineStats& s, const EngineStats& before) {
  std::string out;
  for (size_t i = 0; i < s.hosts.size(); ++i) {
    const HostReport& h = s.hosts[i];
    const HostReport b = i < before.hosts.size() ? before.hosts[i] : HostReport{};
    out += fmt::format(
        "{}\n    {{\"rank\": {}, \"name\": {}, \"expert_runs\": {}, \"expert_bytes_read\": {}, \"hits\": {}, \"misses\": {}, "
        "\"cache_budget\": {}, \"busy_seconds\": {:.6f}, \"io_wait_seconds\": {:.6f}, \"drive_busy_seconds\": {:.6f}, "
        "\"round_trips\": {}, \"round_trip_seconds\": {:.6f}, \"network_seconds\": {:.6f}, \"stall_seconds\": {:.6f}, "
        "\"bytes_to\": {}, \"bytes_from\": {}, \"decode_expert_bytes_read\": {}, \"decode_network_seconds\": {:.6f}, "
        "\"decode_stall_seconds\": {:.6f}, \"decode_round_trips\": {}, \"decode_round_trip_seconds\": {:.6f}, "
        "\"decode_bytes_to\": {}, \"decode_bytes_from\": {}}}",
        out.empty() ? "" : ",", h.rank, json_string(h.name), h.expert_runs, h.expert_bytes_read, h.hits, h.misses,
        h.cache_budget_bytes, h.busy_seconds, h.io_wait_seconds, h.drive_busy_seconds, h.round_trips, h.round_trip_seconds,
        h.network_seconds, h.stall_seconds, h.bytes_to, h.bytes_from, h.expert_bytes_read - b.expert_bytes_read,
        h.network_seconds - b.network_seconds, h.stall_seconds - b.stall_seconds, h.round_trips - b.round_trips,
        h.round_trip_seconds - b.round_trip_seconds, h.bytes_to - b.bytes_to, h.bytes_from - b.bytes_from);
  }
  return out;
}

}  // namespace deltafin::cli
