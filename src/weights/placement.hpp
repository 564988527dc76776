// The placement manifest: where every routed expert lives once `deltafin place` has repacked
// the experts into expert-contiguous records on one or more drives, and where each spine matrix
// tensor's own record lives (read by the streamed spine, io/spine_stream.hpp). Versioned JSON:
//   { "format": "deltafin-placement", "version": 3,
//     "model": "<xxh3 fingerprint of the expert tensors' names, dtypes and shapes>",
//     "alignment": 4096,
//     "sources": [["model-00001-of-00002.safetensors", bytes, mtime_ns], ...],  // shards the experts came from
//     "drives": ["/mnt/d0/deltafin-experts-<model>.bin", ...],      // one data file per drive
//     "records": [[layer, expert, payload_bytes, "<xxh3 of the payload>", [[drive, offset], ...]], ...],
//     "spine": [["<tensor name>", bytes, "<xxh3 of the tensor>", [[drive, offset], ...]], ...] }
// Version 2 manifests (no "spine") are still read: they have no spine records, and the streamed
// spine is then read from the checkpoint's shards.
// Version 4 (a placement over several hosts, `deltafin place --hosts N`) adds
//     "drive_hosts": [0, 0, 1, 1, ...],   // the host (0..H-1) of each drive; every host has a drive
// Without it (versions 2 and 3, or a version 4 manifest that omits it) every drive is on host 0:
// one host. A one-host manifest is still written as version 3, so older builds read it. Host r
// (MPI rank r, src/hosts/) opens only its own drives: host_share() is the manifest as that host
// sees it. A record's holders may lie on several hosts (--replicate-hosts); its primary (first)
// holder's host comes first in record_hosts(). Spine records lie on host 0's drives (rank 0
// streams the spine).
// Every record starts at an `alignment`-aligned offset and occupies round_up(payload, alignment)
// bytes (zero padding), so O_DIRECT reads need no bounce buffer. A record's holders are every
// drive with a copy (the first is the primary). parse_placement() checks everything a reader
// relies on and names the file in every error; it is fuzzed.
// Staleness: a record's XXH3 is the hash of its expert's source tensor bytes as laid out in the
// record (zero padding between parts; a spine record: the tensor's bytes), taken while placing, so `verify --against-shards` can
// compare records with the checkpoint; `run` compares each source shard's size and modification
// time with `sources` and refuses a placement whose shards changed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weights/expert_table.hpp"

namespace deltafin {

struct PlacementHolder {
  int drive = 0;
  uint64_t offset = 0;  // byte offset of the record in that drive's data file
};

struct PlacedRecord {
  int64_t layer = 0, expert = 0;
  uint64_t payload = 0;   // bytes of the record's data (RecordLayout::payload)
  uint64_t xxh3 = 0;      // XXH3-64 of those bytes
  std::vector<PlacementHolder> holders;
};

// One spine tensor (a matrix's weight or scales) as a record of its own: the tensor's bytes,
// padded to `alignment`, at each holder's offset.
struct PlacedSpineRecord {
  std::string tensor;    // its full name in the checkpoint
  uint64_t payload = 0;  // the tensor's bytes
  uint64_t xxh3 = 0;     // XXH3-64 of them
  std::vector<PlacementHolder> holders;
};

// A checkpoint shard that held placed (expert or spine) tensors when the placement was made.
struct PlacementSource {
  std::string shard;     // file name inside the model directory
  uint64_t bytes = 0;    // its size then
  int64_t mtime_ns = 0;  // its modification time then (ns since the epoch)
  bool operator==(const PlacementSource&) const = default;
};

struct PlacementManifest {
  static constexpr int kVersion = 4;          // the newest read, written for several hosts
  static constexpr int kOneHostVersion = 3;   // written for one host (no "drive_hosts")
  static constexpr int kOldestReadable = 2;   // read (without spine records)
  std::string model;                  // fingerprint (model_fingerprint())
  uint64_t alignment = 4096;
  std::vector<PlacementSource> sources;  // in the checkpoint's shard order
  std::vector<std::string> drives;    // data file paths, one per drive
  std::vector<PlacedRecord> records;  // ordered by (layer, expert)
  std::vector<PlacedSpineRecord> spine;  // in the order they lie on the drives; names unique
  std::vector<int> drive_hosts;       // version 4: the host of each drive; empty: every drive on host 0
  // Set by host_share() only (not part of the JSON): the host whose share this is (-1: the
  // whole placement), and the whole placement's spine tensor names (the staleness check counts
  // their shards although the share may hold none of their records).
  int share_host = -1;
  std::vector<std::string> share_spine_tensors;

  // The record of (layer, expert), or nullptr.
  const PlacedRecord* find(int64_t layer, int64_t expert) const;
  // Hosts the drives are spread over (1 without "drive_hosts").
  int hosts() const;
  // The host of drive `drive`.
  int drive_host(int drive) const { return drive_hosts.empty() ? 0 : drive_hosts[static_cast<size_t>(drive)]; }
  // The spine tensors the placement holds records of (a share: the whole placement's).
  std::vector<std::string> spine_tensor_names() const;
};

// The placement as host `host` (0..hosts()-1) sees it: only that host's drives (in their order,
// numbered from 0), each record and spine record with only its holders on those drives (in their
// order), and the records left without a holder removed. Model, alignment and sources stay, so a
// reader checks the share against the checkpoint as it checks the whole placement. The share is
// one host's (no drive_hosts; share_host = host), and ExpertReader::from_placement takes it with
// the other hosts' experts missing; printed and read back it is a one-host manifest without them,
// which a reader refuses. Throws deltafin::Error for a host out of range.
PlacementManifest host_share(const PlacementManifest& manifest, int host);
// The distinct hosts holding `record` (a record of `manifest`), its primary holder's host first,
// the others in the order of the holders.
std::vector<int> record_hosts(const PlacementManifest& manifest, const PlacedRecord& record);

// Parses manifest text read from `path` (named in messages). Throws deltafin::Error.
PlacementManifest parse_placement(std::string_view json, const std::string& path);
PlacementManifest read_placement(const std::string& path);
// The JSON text of a manifest (compact: one record per line).
std::string placement_json(const PlacementManifest& manifest);

// Fingerprint of a checkpoint's routed experts: XXH3 over every expert tensor's name, dtype,
// shape and size, in (layer, expert, part) order. A manifest only serves the model it was made for.
std::string model_fingerprint(const ExpertTable& experts);

// The shards that hold `experts` tensors or the spine tensors named in `spine_tensors` now, with
// their size and modification time.
std::vector<PlacementSource> placement_sources(const WeightIndex& index, const ExpertTable& experts,
                                               const std::vector<std::string>& spine_tensors);
// One line per difference between the sources a placement was made from and `now`, each naming
// the shard; empty when the placement is current.
std::vector<std::string> source_changes(const PlacementManifest& manifest, const std::vector<PlacementSource>& now);

// Usage statistics (`deltafin run --record-usage FILE`): requests per (layer, expert), used by
// `deltafin place --usage` to choose which experts to replicate.
//   {"format": "deltafin-usage", "version": 1, "model": "<fingerprint>", "counts": [[layer, [n0, n1, ...]], ...]}
using ExpertUsage = std::vector<std::vector<uint64_t>>;  // [layer][expert]; empty rows for dense layers
std::string usage_json(const std::string& model, const ExpertUsage& usage);
// Reads usage written for the model with fingerprint `model` and shape of `experts`; throws otherwise.
ExpertUsage read_usage(const std::string& path, const std::string& model, const ExpertTable& experts);

// Default manifest location for a model directory.
std::string default_placement_path(const std::string& model_dir);

}  // namespace deltafin
