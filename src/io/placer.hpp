// `deltafin place`: repacks a checkpoint's routed experts into expert-contiguous records on one
// or more drives and writes the placement manifest; `deltafin verify` checks them.
//   plan_placement: every expert's record (RecordLayout: all projections and scales together,
//     padded to 4096 bytes); primaries spread so that each layer's expected reads (usage counts,
//     or one per expert) and the bytes are balanced over the drives; the most used `replicate`
//     fraction of experts gets a copy on every drive. Each spine tensor (weights/spine_tensors.hpp)
//     becomes a record of its own (its bytes, padded to 4096), on the drive with the fewest spine
//     bytes so far, and on every drive when anything is replicated (a streamed spine record is
//     read every pass, as often as the most used expert). Spine records follow the experts on
//     each drive. Deterministic for the same inputs. Two --drive paths naming one directory (the
//     same path, a symlink, a bind mount: the same device and inode) are refused.
//     Several hosts (`--hosts N`, manifest version 4, weights/placement.hpp): the drives split into
//     N consecutive equal groups, host h's drives being group h. Each layer's experts are shared
//     out over the hosts first (balancing each layer's expected reads, as over drives, in
//     proportion to `host_weights`: equal by default, or e.g. each host's measured drive
//     bandwidth), and each host's experts then spread over its own drives as above (`replicate`
//     applies within each host). The most used `replicate_hosts` fraction of experts (by usage;
//     1 = every expert) also gets a copy on every other host; the primary holder stays on the
//     expert's own host. Spine records go to host 0's drives only (rank 0 streams the spine).
//   write_placement: writes each drive's data file under "<file>.partial", journaling the records
//     that are synced to disk in "<manifest>.journal", so an interrupted run resumes where it
//     stopped; renames the data files and writes the manifest (temporary name + rename) at the
//     end. Before writing it checks that each filesystem holds what its drives still need
//     (drives on one filesystem together; the plan's own .partial files from an interrupted run
//     count as free: they are reused or truncated, so a run stopped by a full disk is simply run
//     again). The source checkpoint is only read, and an expert holding NaN or Inf is refused
//     naming its shard and tensor (a placed record is finite: the reader blames the drive when it
//     is not); the manifest records its shards' sizes and modification times, and each record's
//     XXH3 is that of the source bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weights/expert_table.hpp"
#include "weights/placement.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

struct PlacementPlanOptions {
  std::vector<std::string> drive_dirs;  // one directory per drive
  const ExpertUsage* usage = nullptr;   // recorded usage, or nullptr
  double replicate = 0;                 // fraction of experts copied to every drive (0..1)
  std::vector<TensorRef> spine;         // spine tensors to place (placeable_spine_tensors), or none
  int hosts = 1;                        // hosts the drives are split over (consecutive equal groups)
  std::vector<double> host_weights{};   // each host's share of the expected reads (empty: equal)
  double replicate_hosts = 0;           // fraction of experts (most used first) copied to every host (0..1)
};

PlacementManifest plan_placement(const ExpertTable& experts, const PlacementPlanOptions& options);

struct PlaceProgress {
  uint64_t records_done = 0, records_total = 0;  // expert and spine records
  uint64_t bytes_written = 0;
  uint64_t records_resumed = 0;  // found complete from an interrupted run
};

// Writes the plan's data files and then the manifest at `manifest_path`. `progress` is called
// after every record.
void write_placement(const WeightIndex& index, const ExpertTable& experts, PlacementManifest plan,
                     const std::string& manifest_path, const std::function<void(const PlaceProgress&)>& progress);

struct VerifyFailure {
  int64_t layer, expert;  // -1, -1 for a spine record
  int drive;
  std::string message;
};

// Reads every record (expert and spine) on every holder and compares its XXH3 with the
// manifest's; an expert record that matches is also checked for NaN or Inf (a copy rewritten
// along with its checksum), as the reader checks every read. `progress` counts records.
std::vector<VerifyFailure> verify_placement(const PlacementManifest& manifest, const ExpertTable& experts,
                                            const std::function<void(uint64_t)>& progress);
// Builds every record again from the checkpoint's shards and compares its XXH3 with the
// manifest's: a difference means the experts or spine tensors changed after placing (drive -1 in
// the failures).
std::vector<VerifyFailure> verify_against_shards(const PlacementManifest& manifest, const WeightIndex& index,
                                                 const ExpertTable& experts, const std::function<void(uint64_t)>& progress);

}  // namespace deltafin
