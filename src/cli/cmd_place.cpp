// `deltafin place -m DIR --drive PATH [--drive PATH ...] [--usage FILE] [--replicate F] [--out FILE]`:
// repacks the routed experts into expert-contiguous records on the drives, gives each spine
// matrix tensor a record of its own there (read when the spine streams), and writes the
// placement manifest (default: DIR/deltafin-placement.json), which run, logits and bench then
// use. An interrupted run resumes when started again with the same arguments.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "io/placer.hpp"
#include "model/family.hpp"
#include "weights/spine_tensors.hpp"

namespace deltafin::cli {

Command register_place(CLI::App& app) {
  struct Flags {
    std::string model_dir, usage, out;
    std::vector<std::string> drives;
    double replicate = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand("place", "Repack the routed experts and spine matrices into aligned records spread over drives");
  sub->add_option("-m,--model", f->model_dir, "Model directory (default: the bundled models/default)");
  sub->add_option("--drive", f->drives, "A directory on one drive (repeat for each drive)")->required();
  sub->add_option("--usage", f->usage, "Usage statistics from `deltafin run --record-usage`");
  sub->add_option("--replicate", f->replicate,
                  "Fraction of experts (most used first) copied to every drive; 1 = every expert")->capture_default_str();
  sub->add_option("--out", f->out, "Manifest path (default: MODEL/deltafin-placement.json)");
  return {sub, [f] {
            f->model_dir = model_dir_or_default(f->model_dir);
            const auto index = WeightIndex::open(f->model_dir);
            const ExpertTable experts = load_expert_table(f->model_dir, *index);
            ExpertUsage usage;
            PlacementPlanOptions options{f->drives, nullptr, f->replicate, placeable_spine_tensors(*index, experts)};
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
            std::printf("placed %zu expert records and %zu spine records on %zu drive(s) (%.3f GB written%s); manifest %s\n",
                        plan.records.size(), plan.spine.size(), plan.drives.size(), last.bytes_written / 1e9,
                        last.records_resumed ? fmt::format(", {} records resumed", last.records_resumed).c_str() : "",
                        out.c_str());
            return 0;
          }};
}

}  // namespace deltafin::cli
