// `deltafin verify -m DIR [--placement FILE] [--against-shards [--update-sources]]`: checks that a
// placement still belongs to its checkpoint (fingerprint, and each source shard's size and
// modification time) and reads every expert and spine record on every drive that holds it,
// comparing its XXH3 with the manifest (and checking that an expert's weights and scales are
// finite, as a run does on every read). --against-shards also builds every record again from the shards and
// compares (a checkpoint whose bytes changed under an unchanged size and mtime); with
// --update-sources, a placement whose records all match gets the shards' current sizes and
// modification times written into its manifest (after a `touch` or a copy that kept the bytes).
// Prints one line per problem; exit 1 when there is any.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "io/placer.hpp"
#include "model/family.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"

namespace deltafin::cli {

Command register_verify(CLI::App& app) {
  struct Flags {
    std::string model_dir, placement;
    bool against_shards = false, update_sources = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand("verify", "Check every placed expert record against its checksum and its checkpoint");
  sub->add_option("-m,--model", f->model_dir, "Model directory (default: the bundled models/default)");
  sub->add_option("--placement", f->placement, "Manifest (default: MODEL/deltafin-placement.json)");
  sub->add_flag("--against-shards", f->against_shards,
                "Also build every record again from the checkpoint's shards and compare (reads the experts once more)");
  sub->add_flag("--update-sources", f->update_sources,
                "With --against-shards: when every record matches, record the shards' current sizes and times")
      ->needs("--against-shards");
  return {sub, [f] {
            f->model_dir = model_dir_or_default(f->model_dir);
            const std::string path = f->placement.empty() ? default_placement_path(f->model_dir) : f->placement;
            std::unique_ptr<OutputFile> rewrite;
            if (f->update_sources) rewrite = std::make_unique<OutputFile>(path);  // opened first: fails before the reading
            PlacementManifest manifest = read_placement(path);
            const auto index = WeightIndex::open(f->model_dir);
            const ExpertTable experts = load_expert_table(f->model_dir, *index);
            const std::string fingerprint = model_fingerprint(experts);
            if (manifest.model != fingerprint)
              fail("{}: placement made for a different model (fingerprint {}, this model {})", path, manifest.model, fingerprint);
            const std::vector<PlacementSource> sources = placement_sources(*index, experts, manifest.spine_tensor_names());
            const std::vector<std::string> changes = source_changes(manifest, sources);
            for (const std::string& change : changes) std::fprintf(stderr, "deltafin: %s: stale placement: %s\n", path.c_str(), change.c_str());

            const size_t records = manifest.records.size() + manifest.spine.size();
            Progress progress("verify", static_cast<int64_t>(records));
            std::vector<VerifyFailure> failures =
                verify_placement(manifest, experts, [&](uint64_t done) { progress.update(static_cast<int64_t>(done)); });
            progress.finish();
            size_t shard_failures = 0;
            if (f->against_shards) {
              Progress compare("compare with shards", static_cast<int64_t>(records));
              const std::vector<VerifyFailure> differ = verify_against_shards(
                  manifest, *index, experts, [&](uint64_t done) { compare.update(static_cast<int64_t>(done)); });
              compare.finish();
              shard_failures = differ.size();
              failures.insert(failures.end(), differ.begin(), differ.end());
            }
            for (const VerifyFailure& failure : failures) std::fprintf(stderr, "deltafin: %s\n", failure.message.c_str());
            uint64_t copies = 0;
            for (const PlacedRecord& r : manifest.records) copies += r.holders.size();
            for (const PlacedSpineRecord& r : manifest.spine) copies += r.holders.size();
            if (!failures.empty()) {
              std::fprintf(stderr, "deltafin: %zu of %llu record copies failed verification", failures.size() - shard_failures,
                           static_cast<unsigned long long>(copies));
              if (f->against_shards)
                std::fprintf(stderr, "; %zu of %zu records differ from the shards", shard_failures, records);
              std::fprintf(stderr, "\n");
              return 1;
            }
            if (!changes.empty() && rewrite) {
              manifest.sources = sources;
              rewrite->write(placement_json(manifest));
              std::printf("verified %llu record copies of %zu experts and %zu spine tensors on %zu drive(s) and against the "
                          "shards: all match; recorded the shards' current sizes and times in %s\n",
                          static_cast<unsigned long long>(copies), manifest.records.size(), manifest.spine.size(),
                          manifest.drives.size(), path.c_str());
              check_stdout();
              return 0;
            }
            if (!changes.empty()) {
              std::fprintf(stderr, "deltafin: the records match%s, but the checkpoint's shards changed since placing; run "
                                   "`deltafin place` again%s\n",
                           f->against_shards ? " the drives and the shards" : " the drives",
                           f->against_shards ? " (or add --update-sources when the change was only a copy or a touch)"
                                             : " (or compare with `--against-shards`)");
              return 1;
            }
            std::printf("verified %llu record copies of %zu experts and %zu spine tensors on %zu drive(s)%s: all match\n",
                        static_cast<unsigned long long>(copies), manifest.records.size(), manifest.spine.size(),
                        manifest.drives.size(),
                        f->against_shards ? " and against the shards" : "");
            check_stdout();
            return 0;
          }};
}

}  // namespace deltafin::cli
