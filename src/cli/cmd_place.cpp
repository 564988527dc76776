// `deltafin place -m DIR --drive PATH [--drive PATH ...] [--usage FILE] [--replicate F] [--out FILE]
//  [--hosts N [--host-weights W0,W1,...] [--replicate-hosts F]]`:
// repacks the routed experts into expert-contiguous records on the drives, gives each spine
// matrix tensor a record of its own there (read when the spine streams), and writes the
// placement manifest (default: DIR/deltafin-placement.json), which run, logits and bench then
// use. With --hosts N the drives are N consecutive equal groups, one per host, and each host gets
// its share of every layer's experts (io/placer.hpp). An interrupted run resumes when started
// again with the same arguments.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "io/placer.hpp"
#include "model/family.hpp"
#include "weights/spine_tensors.hpp"

namespace deltafin::cli {
namespace {

// "3,1.5,2" -> {3, 1.5, 2}; an entry that is no number becomes NaN (plan_placement refuses it).
std::vector<double> parse_weights(const std::string& text) {
  std::vector<double> weights;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const double w = std::strtod(item.c_str(), &end);
    weights.push_back(!item.empty() && end && *end == '\0' ? w : std::nan(""));
  }
  if (!text.empty() && text.back() == ',') weights.push_back(std::nan(""));
  return weights;
}

}  // namespace

Command register_place(CLI::App& app) {
  struct Flags {
    std::string model_dir, usage, out;
    std::vector<std::string> drives;
    double replicate = 0, replicate_hosts = 0;
    int hosts = 1;
    std::string host_weights;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand("place", "Repack the routed experts and spine matrices into aligned records spread over drives");
  sub->add_option("-m,--model", f->model_dir, "Model directory (default: the bundled models/default)");
  sub->add_option("--drive", f->drives, "A directory on one drive (repeat for each drive)")->required();
  sub->add_option("--usage", f->usage, "Usage statistics from `deltafin run --record-usage`");
  sub->add_option("--replicate", f->replicate,
                  "Fraction of experts (most used first) copied to every drive; 1 = every expert")->capture_default_str();
  sub->add_option("--out", f->out, "Manifest path (default: MODEL/deltafin-placement.json)");
  sub->add_option("--hosts", f->hosts,
                  "Hosts (MPI ranks) to share the experts over: the --drive list is that many consecutive equal groups, "
                  "one per host")->capture_default_str();
  sub->add_option("--host-weights", f->host_weights,
                  "Each host's share of the expert reads, e.g. its measured drive bandwidth: W0,W1,... (default: equal)");
  sub->add_option("--replicate-hosts", f->replicate_hosts,
                  "Fraction of experts (most used first, needs --usage; 1 = every expert) copied to every host")
      ->capture_default_str();
  return {sub, [f] {
            f->model_dir = model_dir_or_default(f->model_dir);
            const auto index = WeightIndex::open(f->model_dir);
            const ExpertTable experts = load_expert_table(f->model_dir, *index);
            ExpertUsage usage;
            PlacementPlanOptions options{f->drives, nullptr, f->replicate, placeable_spine_tensors(*index, experts)};
            options.hosts = f->hosts;
            options.host_weights = parse_weights(f->host_weights);
            options.replicate_hosts = f->replicate_hosts;
            if (!f->usage.empty()) {
              usage = read_usage(f->usage, model_fingerprint(experts), experts);
              options.usage = &usage;
            }
            const PlacementManifest plan = plan_placement(experts, options);
            const std::string out = f->out.empty() ? default_placement_path(f->model_dir) : f->out;
            Progress progress("place", static_cast<int64_t>(plan.records.size() + plan.spine.size()));
            PlaceProgress last;
            write_placement(*index, experts, plan, out, [&](const PlaceProgress& p) {
              progress.update(static_cast<int64_t>(p.records_done));
              last = p;
            });
            progress.finish();
            std::printf("placed %zu expert records and %zu spine records on %zu drive(s)%s (%.3f GB written%s); manifest %s\n",
                        plan.records.size(), plan.spine.size(), plan.drives.size(),
                        plan.hosts() > 1 ? fmt::format(" of {} hosts", plan.hosts()).c_str() : "", last.bytes_written / 1e9,
                        last.records_resumed ? fmt::format(", {} records resumed", last.records_resumed).c_str() : "",
                        out.c_str());
            return 0;
          }};
}

}  // namespace deltafin::cli
