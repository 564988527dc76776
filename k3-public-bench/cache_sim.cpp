// cache_sim: replays routing traces (`deltafin run --record-routing`, or a synthetic model of
// routing from tools/make_k3_trace.py) through the expert store's cache (src/io/cache_simulator.hpp)
// and prints, per budget, the hit rate, expert bytes read per decoded token and the load on each
// drive. Budgets: --budget-bytes (exactly the store's; the receipt's memory.budget) or
// --budget-fraction (of all experts; several, comma-separated). --policy oracle gives Belady's
// bound instead of the store's policy. --json writes the rows.
//   cache_sim TRACE... [--budget-fraction 0.01,0.1,0.5] [--drives N] [--hosts N --host H] [--verify-width W]
//             [--policy store|oracle] [--half-life PASSES] [--json FILE]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "hosts/expert_owners.hpp"
#include "io/cache_simulator.hpp"
#include "util/error.hpp"

using namespace deltafin;

namespace {

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    try {
      out.push_back(std::stod(s.substr(at, comma - at)));
    } catch (...) {
      fail("--budget-fraction: '{}' is not a list of numbers", s);
    }
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Replays routing traces through the expert store's cache policy");
  std::vector<std::string> traces;
  std::string fractions, policy = "store", json_path;
  uint64_t budget_bytes = 0;
  int drives = 1, hosts = 1, host = 0;
  int64_t verify_width = 0;
  double half_life = CachePolicyOptions().half_life;
  app.add_option("traces", traces, "Routing traces")->required()->check(CLI::ExistingFile);
  app.add_option("--budget-bytes", budget_bytes, "The store's expert budget in bytes");
  app.add_option("--budget-fraction", fractions, "Budgets as fractions of all experts, comma-separated");
  app.add_option("--drives", drives, "Drives the records are striped over (expert % drives)")->check(CLI::Range(1, 1024));
  app.add_option("--hosts", hosts, "Hosts the experts are shared over (as mpirun without a host placement)")->check(CLI::Range(1, 1024));
  app.add_option("--host", host, "Which host's store to simulate (0-based; its budget is the one given)")->check(CLI::Range(0, 1023));
  app.add_option("--verify-width", verify_width, "Decode passes regrouped into verify passes of this many positions")
      ->check(CLI::Range(int64_t{0}, int64_t{64}));
  app.add_option("--policy", policy, "store (the expert store's) or oracle (Belady's bound)")->check(CLI::IsMember({"store", "oracle"}));
  app.add_option("--half-life", half_life, "The store's policy: the half-life of its counts, in passes")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "Write the rows as JSON lines to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    if ((budget_bytes == 0) == fractions.empty()) fail("give one of --budget-bytes and --budget-fraction");
    if (host >= hosts) fail("--host {}: there are only {} hosts (0..{})", host, hosts, hosts - 1);
    std::string json;
    std::printf("%-28s %9s %8s %8s %10s %12s %12s  %s\n", "trace", "budget", "slots", "share", "hit rate", "bytes/token",
                "bytes read", "per-drive bytes");
    for (const std::string& path : traces) {
      const RoutingTrace trace = read_routing_trace(path);
      const RoutingTraceHeader& h = trace.header;
      const uint64_t all = h.moe_layers.size() * static_cast<uint64_t>(h.experts) * h.slot_bytes;
      std::vector<uint64_t> budgets;
      if (budget_bytes) budgets.push_back(budget_bytes);
      for (double f : fractions.empty() ? std::vector<double>{} : parse_list(fractions)) {
        if (!(f > 0 && f <= 1)) fail("--budget-fraction: {} is not in (0, 1]", f);
        budgets.push_back(std::max<uint64_t>(h.slot_bytes, static_cast<uint64_t>(f * static_cast<double>(all)) / h.slot_bytes * h.slot_bytes));
      }
      for (uint64_t b : budgets) {
        CacheSimOptions o;
        o.budget_bytes = b;
        o.drives = drives;
        o.verify_width = verify_width;
        if (hosts > 1) {
          // rank 0 shares each pass out as hosts/host_experts.cpp does without a host placement
          const auto owners = std::make_shared<hosts::ExpertOwners>(hosts::ExpertOwners::equal_shares(hosts, h.layers, h.experts));
          o.share = [owners, host](int64_t layer, std::span<const int32_t> all) {
            const std::vector<int> who = owners->balance(layer, all);
            std::vector<int32_t> mine;
            for (size_t i = 0; i < all.size(); ++i)
              if (who[i] == host) mine.push_back(all[i]);
            return mine;
          };
          o.expert_host = host > 0;
        }
        o.policy.half_life = half_life;
        const CacheSimResult r = policy == "oracle" ? simulate_oracle(trace, o) : simulate_cache(trace, o);
        std::string per_drive;
        for (uint64_t d : r.drive_bytes) per_drive += fmt::format("{}{}", per_drive.empty() ? "" : ",", d);
        const double hit = r.hits + r.misses ? double(r.hits) / double(r.hits + r.misses) : 0;
        const double share = double(r.slots * h.slot_bytes) / double(all);
        std::printf("%-28s %9.4g %8llu %8.4f %10.4f %12.0f %12llu  %s\n", path.substr(path.size() > 28 ? path.size() - 28 : 0).c_str(),
                    double(b) / 1e9, (unsigned long long)r.slots, share, hit, r.bytes_per_decoded_token(),
                    (unsigned long long)r.bytes_read, per_drive.c_str());
        json += fmt::format(
            "{{\"trace\": \"{}\", \"source\": \"{}\", \"policy\": \"{}\", \"budget_bytes\": {}, \"slots\": {}, \"share\": {:.6f}, "
            "\"drives\": {}, \"hosts\": {}, \"host\": {}, \"verify_width\": {}, \"hits\": {}, \"misses\": {}, \"bytes_read\": {}, \"decode_bytes_read\": {}, "
            "\"decode_positions\": {}, \"bytes_per_decoded_token\": {:.1f}, \"drive_bytes\": [{}]}}\n",
            path, h.source, policy, b, r.slots, share, drives, hosts, host, verify_width, r.hits, r.misses, r.bytes_read, r.decode_bytes_read,
            r.decode_positions, r.bytes_per_decoded_token(), per_drive);
      }
    }
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      if (!(out << json)) fail("{}: cannot write", json_path);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "cache_sim: %s\n", e.what());
    return 1;
  }
  return 0;
}
