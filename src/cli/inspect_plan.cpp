// The plan lines of `deltafin inspect` (see inspect_plan.hpp).
#include "cli/inspect_plan.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "decode/memory_plan.hpp"
#include "io/expert_store.hpp"
#include "util/error.hpp"

namespace deltafin::cli {
namespace {

constexpr uint64_t kRecordAlign = 4096;  // expert records are padded to 4 KiB (weights/expert_record)

std::vector<double> parse_rates(const std::string& text) {
  std::vector<double> rates;
  for (size_t i = 0; !text.empty() && i <= text.size();) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || errno || !(v > 0 && v < 1e4))
      fail("--drive-gbps: '{}' is not a read rate in GB/s (expected a comma-separated list like 3.2,3.2)", item);
    rates.push_back(v);
    i = j + 1;
  }
  return rates;
}

// "layers 3-40, 42" style list of the units with resident == want.
std::string unit_list(const std::vector<SpineUnit>& units, const std::vector<bool>& resident, bool want) {
  std::string out;
  for (size_t u = 0; u < units.size();) {
    if (resident[u] != want) {
      ++u;
      continue;
    }
    size_t v = u;
    const bool layer = units[u].name.rfind("layer ", 0) == 0;
    while (layer && v + 1 < units.size() && resident[v + 1] == want && units[v + 1].name.rfind("layer ", 0) == 0) ++v;
    if (!out.empty()) out += ", ";
    out += v > u ? fmt::format("layers {}-{}", units[u].name.substr(6), units[v].name.substr(6)) : units[u].name;
    u = v + 1;
  }
  return out.empty() ? "nothing" : out;
}

}  // namespace

std::optional<PrintedPlan> print_memory_plan(const FamilyDescription& d, const PlanFlags& f) {
  const bool device = f.device_memory_gb != 0;
  if (f.memory_gb == 0 && !device && f.drive_gbps.empty()) return std::nullopt;
  if (f.memory_gb == 0 && !device) fail("--drive-gbps needs --memory-gb (the plan the rates apply to)");
  if (f.memory_gb != 0 && !(f.memory_gb > 0 && f.memory_gb <= 1e9)) fail("--memory-gb must be a number of GB > 0 (got {})", f.memory_gb);
  if (device && !(f.device_memory_gb > 0 && f.device_memory_gb <= 1e9))
    fail("--device-memory-gb must be a number of GB > 0 (got {})", f.device_memory_gb);
  if (f.positions < 0) fail("--positions must be >= 0 (got {})", f.positions);
  if (f.chunk < 0) fail("--chunk must be a whole number of positions >= 1 (got {})", f.chunk);
  const std::vector<double> rates = parse_rates(f.drive_gbps);
  const ModelBytes& b = d.bytes;
  BudgetInput in;
  in.budget = static_cast<uint64_t>((device ? f.device_memory_gb : f.memory_gb) * 1e9);
  in.flag = device ? "--device-memory-gb" : "--memory-gb";
  in.units = spine_units(b);
  in.state = planned_state_bytes(b, f.positions);
  in.reserve = working_reserve(b.spine);
  if (d.moe_layers > 0 && d.top_k > 0) {
    const uint64_t record = b.routed_per_token / static_cast<uint64_t>(d.moe_layers * d.top_k);
    in.expert_slot = (record + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
    in.all_experts = in.expert_slot * static_cast<uint64_t>(d.moe_layers * d.experts);
  }
  in.routed_per_token = b.routed_per_token;
  in.top_k = d.top_k;
  in.activations = b.activations;
  const int64_t whole = f.positions > 0 ? f.positions : kMaxPassPositions;
  in.pass_positions_wanted = f.chunk > 0 ? std::min(f.chunk, whole) : whole;
  BudgetPlan p = plan_budget(in, fmt::format("{} {}", in.flag, device ? f.device_memory_gb : f.memory_gb));
  const auto gb = [](uint64_t bytes) { return bytes / 1e9; };
  const uint64_t host = f.memory_gb > 0 ? static_cast<uint64_t>(f.memory_gb * 1e9) : UINT64_MAX / 4;
  if (device) {
    plan_host(p, in.units, host, host_fixed_bytes(b.spine, in.expert_slot, ExpertStore::kStagingSlots),
              fmt::format("--memory-gb {}", f.memory_gb));
  }
  std::printf("%s %.4f GB: spine %.6f GB resident + %.6f GB streamed (window %.6f GB), experts %.6f GB, "
              "KV cache and state %.6f GB (%lld positions), working %.6f GB; minimum %.6f GB\n",
              device ? "device        " : "budget        ", gb(in.budget), gb(p.spine_resident), gb(p.spine_streamed),
              gb(p.window), gb(p.experts), gb(in.state), (long long)f.positions, gb(in.reserve), gb(p.minimum));
  if (device) {
    std::printf("host           %s: streamed spine %.6f GB held + %.6f GB from the drives (pinned window %.6f GB), working "
                "and expert staging %.6f GB; minimum %.6f GB\n",
                f.memory_gb > 0 ? fmt::format("{:.4f} GB", gb(host)).c_str() : "unbounded (no --memory-gb)",
                gb(p.spine_host), gb(p.spine_streamed - p.spine_host), gb(p.host_window), gb(p.host_fixed), gb(p.host_minimum));
    std::vector<bool> from_host(in.units.size()), from_drives(in.units.size());
    for (size_t u = 0; u < in.units.size(); ++u) from_host[u] = p.host_held[u], from_drives[u] = !p.resident[u] && !p.host_held[u];
    std::printf("resident       %s\n", unit_list(in.units, p.resident, true).c_str());
    std::printf("from host      %s\n", unit_list(in.units, from_host, true).c_str());
    std::printf("from drives    %s\n", unit_list(in.units, from_drives, true).c_str());
  } else {
    std::printf("resident       %s\n", unit_list(in.units, p.resident, true).c_str());
    std::printf("streamed       %s\n", unit_list(in.units, p.resident, false).c_str());
  }
  const int64_t passes = f.positions > 0 ? (f.positions + p.pass_positions - 1) / p.pass_positions : 0;
  std::printf("prefill pass   %lld positions%s, activations %.6f GB (%.6f MB a position); %lld pass(es) for %lld positions, "
              "each reading the union of the experts its positions chose\n",
              (long long)p.pass_positions, f.chunk > 0 ? fmt::format(" (--chunk {})", f.chunk).c_str() : "",
              gb(p.pass_activations), b.activations.per_position() / 1e6, (long long)passes, (long long)f.positions);
  std::printf("read/token     %.6f GB = spine %.6f GB + experts %.6f GB (%lld MoE layers x top-%lld x %.6f GB, "
              "hit rate %.4f%% under uniform use)\n",
              gb(p.read_per_token()), gb(p.spine_read_per_token), gb(p.expert_read_per_token), (long long)d.moe_layers,
              (long long)d.top_k, gb(in.expert_slot), 100 * p.expert_hit_rate);
  if (device)
    std::printf("to device      %.6f GB a token, host to device = streamed spine %.6f GB + expert reads %.6f GB\n",
                gb(p.upload_per_token), gb(p.spine_streamed), gb(p.expert_read_per_token));
  if (rates.empty()) return PrintedPlan{p, in.expert_slot, rates};
  double sum = 0;
  std::string each;
  for (double r : rates) sum += r, each += (each.empty() ? "" : " + ") + fmt::format("{}", r);
  std::printf("predicted      %.4f tok/s from %zu drive(s) at %s = %.4g GB/s (reads alone: the I/O ceiling)\n",
              p.read_per_token() ? sum * 1e9 / p.read_per_token() : INFINITY, rates.size(), each.c_str(), sum);
  return PrintedPlan{p, in.expert_slot, rates};
}

}  // namespace deltafin::cli
