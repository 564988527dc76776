// `deltafin inspect -m DIR`: architecture, layer and expert counts, parameters by dtype, and the
// routed-expert bytes one token reads, and with --memory-gb the memory plan (inspect_plan.hpp), with --hosts the
// projection over several hosts (inspect_hosts.hpp). Reads headers only, never tensor data; a directory that
// holds only config.json is described from the config alone.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/inspect_hosts.hpp"
#include "cli/inspect_plan.hpp"
#include "util/human_bytes.hpp"
#include "model/family.hpp"

namespace deltafin::cli {
namespace {

namespace fs = std::filesystem;

bool has_weights(const std::string& dir) {
  return fs::exists(fs::path(dir) / "model.safetensors") || fs::exists(fs::path(dir) / "model.safetensors.index.json");
}

void print_bytes(const char* source, uint64_t routed, uint64_t per_token, uint64_t spine, int64_t moe_layers, int64_t top_k) {
  std::printf("bytes          %.6f GB routed experts, %.6f GB spine (%s)\n", routed / 1e9, spine / 1e9, source);
  std::printf("per token      %.6f GB of routed experts read (%lld MoE layers x top-%lld)\n", per_token / 1e9,
              (long long)moe_layers, (long long)top_k);
}

// Parameters by dtype and routed bytes from the tensors themselves.
void print_tensors(const WeightIndex& index, const ExpertTable& experts, int64_t top_k, int64_t n_experts) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (elements, bytes)
  uint64_t total = 0, routed = 0, per_token = 0;
  int64_t moe = 0;
  for (const TensorRef& t : index.all_tensors()) {
    auto& [elements, bytes] = by_dtype[std::string(dtype_name(t.info->dtype))];
    elements += t.info->numel();
    bytes += t.info->nbytes;
    total += t.info->nbytes;
  }
  for (int64_t l = 0; l < experts.layers(); ++l) {
    if (!experts.has(l)) continue;
    ++moe;
    routed += experts.layer_bytes(l);
    per_token += experts.layer_bytes(l) / n_experts * top_k;  // experts of a layer are equal-sized
  }
  for (const auto& [dtype, counts] : by_dtype)
    std::printf("params %-7s %llu (%.6f GB)\n", dtype.c_str(), (unsigned long long)counts.first, counts.second / 1e9);
  print_bytes("from the tensors", routed, per_token, total - routed, moe, top_k);
}

// Parameters and bytes from the config, then, when the directory holds weights, from the tensors themselves.
void print_sizes(const std::string& dir, const std::string& config_path, bool weights, const Family& family,
                 const FamilyDescription& d) {
  const ModelBytes& b = d.bytes;
  std::printf("parameters     %.4f B (from config.json)\n", b.parameters / 1e9);
  std::printf("kv cache       %s per position (float32 latent cache)", human_bytes(b.kv_per_position).c_str());
  if (d.context > 0)
    std::printf(", %s at the full context of %lld", human_bytes(b.kv_per_position * d.context).c_str(), (long long)d.context);
  if (b.recurrent_state) std::printf("; recurrent state %s", human_bytes(b.recurrent_state).c_str());
  std::printf("\n");
  if (!weights) return print_bytes("from config.json", b.routed, b.routed_per_token, b.spine, d.moe_layers, d.top_k);
  const auto index = WeightIndex::open(dir);
  print_tensors(*index, family.expert_table(config_path, *index), d.top_k, d.experts);
}

int inspect(const std::string& dir, const PlanFlags& plan, const HostsFlags& hosts) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const Family& family = family_of(config_path);
  const bool weights = has_weights(dir);
  const FamilyDescription d = family.describe(config_path);
  check_hosts_flags(d, plan, hosts);
  std::printf("model          %s%s\n", dir.c_str(), weights ? "" : " (config.json only)");
  for (const std::string& line : d.lines) std::printf("%s\n", line.c_str());
  print_sizes(dir, config_path, weights, family, d);
  const auto printed = print_memory_plan(d, plan);
  if (printed) print_hosts_projection(d, *printed, hosts);
  return 0;
}

}  // namespace

Command register_inspect(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto plan = std::make_shared<PlanFlags>();
  auto hosts = std::make_shared<HostsFlags>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a model directory (headers only; config.json alone works)");
  sub->add_option("-m,--model", *dir, "Model directory (default: the bundled model)");
  sub->add_option("--memory-gb", plan->memory_gb, "Print the memory plan under this budget (GB): what is resident, what streams, bytes read per token");
  sub->add_option("--device-memory-gb", plan->device_memory_gb,
                  "Print the plan for a device with this much memory of its own (GB; a CUDA GPU): which spine units are resident "
                  "on it, which stream from host memory (--memory-gb: its budget; default unbounded) and which from the drives");
  sub->add_option("--drive-gbps", plan->drive_gbps, "The drives' read rates in GB/s (comma-separated): predicted tokens per second");
  sub->add_option("--positions", plan->positions, "Positions whose KV cache and state the plan holds")->capture_default_str();
  sub->add_option("--chunk", plan->chunk, "The most positions a prefill pass takes (default: as many as the plan gives)")
      ->type_name("N")
      ->check(chunk_validator());
  CLI::Option* hosts_option = sub->add_option("--hosts", hosts->hosts,
                  "Project decode over this many equal hosts (MPI ranks), each with --memory-gb and the --drive-gbps drives: "
                  "rank 0 runs the spine, every host its share of the routed experts (docs/hosts-projection.md)");
  sub->add_option("--link", hosts->link,
                  "The hosts' link for --hosts: 10gbe (1.25 GB/s, 100 us round trip), tb5 (MPI over TCP on Thunderbolt 5: "
                  "1.3 GB/s, 300 us), or GBPS:RTT_US (default: both presets)");
  return {sub, [dir, plan, hosts, hosts_option] {
            hosts->given = hosts_option->count() > 0;
            return inspect(model_dir_or_default(*dir), *plan, *hosts);
          }};
}

}  // namespace deltafin::cli
