// `deltafin verify -m DIR [--placement FILE]`: reads every expert record on every drive that
// holds it and checks its XXH3 against the manifest. Prints one line per bad record; exit 1
// when any is bad.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "io/placer.hpp"
#include "model/model_experts.hpp"
#include "util/error.hpp"

namespace deltafin::cli {

Command register_verify(CLI::App& app) {
  struct Flags {
    std::string model_dir, placement;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand("verify", "Check every placed expert record against its checksum");
  sub->add_option("-m,--model", f->model_dir, "Model directory (default: the bundled models/default)");
  sub->add_option("--placement", f->placement, "Manifest (default: MODEL/deltafin-placement.json)");
  return {sub, [f] {
            f->model_dir = model_dir_or_default(f->model_dir);
            const std::string path = f->placement.empty() ? default_placement_path(f->model_dir) : f->placement;
            const PlacementManifest manifest = read_placement(path);
            const auto index = WeightIndex::open(f->model_dir);
            const std::string fingerprint = model_fingerprint(load_expert_table(f->model_dir, *index));
            if (manifest.model != fingerprint)
              fail("{}: placement made for a different model (fingerprint {}, this model {})", path, manifest.model, fingerprint);
            Progress progress("verify", static_cast<int64_t>(manifest.records.size()));
            const std::vector<VerifyFailure> failures =
                verify_placement(manifest, [&](uint64_t done) { progress.update(static_cast<int64_t>(done)); });
            progress.finish();
            for (const VerifyFailure& failure : failures) std::fprintf(stderr, "deltafin: %s\n", failure.message.c_str());
            uint64_t copies = 0;
            for (const PlacedRecord& r : manifest.records) copies += r.holders.size();
            if (!failures.empty()) {
              std::fprintf(stderr, "deltafin: %zu of %llu record copies failed verification\n", failures.size(),
                           static_cast<unsigned long long>(copies));
              return 1;
            }
            std::printf("verified %llu record copies of %zu experts on %zu drive(s): all match\n",
                        static_cast<unsigned long long>(copies), manifest.records.size(), manifest.drives.size());
            return 0;
          }};
}

}  // namespace deltafin::cli
