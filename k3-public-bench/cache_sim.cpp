// cache_sim: replays routing traces (`deltafin run --record-routing`, or a synthetic model of
// routing from tools/make_k3_trace.py) through the expert store's cache (src/io/cache_simulator.hpp)
// and prints, per budget, the hit rate, expert bytes read per decoded token and the load on each
// drive. Budgets: --budget-bytes (exactly the store's; the receipt's memory.budget) or
// --budget-fraction (of all experts; several, comma-separated). --json writes the rows.
//   cache_sim TRACE... [--budget-fraction 0.01,0.1,0.5] [--drives N] [--verify-width W]
//             [--policy cycle-lru|frequency|pinned] [--usage-trace T] [--pinned-share S] [--json FILE]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "io/cache_simulator.hpp"
#include "util/error.hpp"

using namespace deltafin;

namespace {

// Requests per (layer, expert) of a trace (what `run --record-usage` counts): once per pass per layer.
std::vector<std::vector<uint64_t>> trace_usage(const RoutingTrace& t) {
  std::vector<std::vector<uint64_t>> usage(static_cast<size_t>(t.header.layers));
  for (int64_t l : t.header.moe_layers) usage[static_cast<size_t>(l)].assign(static_cast<size_t>(t.header.experts), 0);
  for (const RoutingPass& p : t.passes)
    for (size_t li = 0; li < p.layers.size(); ++li) {
      std::vector<uint16_t> u = p.layers[li];
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      for (uint16_t e : u) ++usage[static_cast<size_t>(t.header.moe_layers[li])][e];
    }
  return usage;
}

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
  std::string fractions, policy = "cycle-lru", usage_trace, json_path;
  uint64_t budget_bytes = 0;
  int drives = 1;
  int64_t verify_width = 0;
  double half_life = 64, pinned_share = 0.5;
  app.add_option("traces", traces, "Routing traces")->required()->check(CLI::ExistingFile);
  app.add_option("--budget-bytes", budget_bytes, "The store's expert budget in bytes");
  app.add_option("--budget-fraction", fractions, "Budgets as fractions of all experts, comma-separated");
  app.add_option("--drives", drives, "Drives the records are striped over (expert % drives)")->check(CLI::Range(1, 1024));
  app.add_option("--verify-width", verify_width, "Decode passes regrouped into verify passes of this many positions")
      ->check(CLI::Range(int64_t{0}, int64_t{64}));
  app.add_option("--policy", policy, "cycle-lru, frequency or pinned")->check(CLI::IsMember({"cycle-lru", "frequency", "pinned"}));
  app.add_option("--half-life", half_life, "frequency: passes")->check(CLI::PositiveNumber);
  app.add_option("--usage-trace", usage_trace, "pinned: the trace whose usage chooses the pinned experts (default: the replayed one)");
  app.add_option("--pinned-share", pinned_share, "pinned: share of the budget's slots pinned")->check(CLI::Range(0.0, 1.0));
  app.add_option("--json", json_path, "Write the rows as JSON lines to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    if ((budget_bytes == 0) == fractions.empty()) fail("give one of --budget-bytes and --budget-fraction");
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
        if (policy == "frequency") o.policy.kind = CachePolicyOptions::Kind::Frequency, o.policy.half_life = half_life;
        if (policy == "pinned") {
          o.policy.kind = CachePolicyOptions::Kind::Pinned;
          o.policy.usage = trace_usage(usage_trace.empty() ? trace : read_routing_trace(usage_trace));
          o.policy.pinned = static_cast<uint64_t>(pinned_share * static_cast<double>(b / h.slot_bytes));
        }
        const CacheSimResult r = simulate_cache(trace, o);
        std::string per_drive;
        for (uint64_t d : r.drive_bytes) per_drive += fmt::format("{}{}", per_drive.empty() ? "" : ",", d);
        const double hit = r.hits + r.misses ? double(r.hits) / double(r.hits + r.misses) : 0;
        const double share = double(r.slots * h.slot_bytes) / double(all);
        std::printf("%-28s %9.4g %8llu %8.4f %10.4f %12.0f %12llu  %s\n", path.substr(path.size() > 28 ? path.size() - 28 : 0).c_str(),
                    double(b) / 1e9, (unsigned long long)r.slots, share, hit, r.bytes_per_decoded_token(),
                    (unsigned long long)r.bytes_read, per_drive.c_str());
        json += fmt::format(
            "{{\"trace\": \"{}\", \"source\": \"{}\", \"policy\": \"{}\", \"budget_bytes\": {}, \"slots\": {}, \"share\": {:.6f}, "
            "\"drives\": {}, \"verify_width\": {}, \"hits\": {}, \"misses\": {}, \"bytes_read\": {}, \"decode_bytes_read\": {}, "
            "\"decode_positions\": {}, \"bytes_per_decoded_token\": {:.1f}, \"drive_bytes\": [{}]}}\n",
            path, h.source, policy, b, r.slots, share, drives, verify_width, r.hits, r.misses, r.bytes_read, r.decode_bytes_read,
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
