// Reads routed-expert records into memory through one DriveQueue per drive. Two sources:
//   - a placement (deltafin place): each record is one aligned extent held by one or more
//     drives; large records are split into concurrent aligned pieces, and each piece goes to
//     the healthy holder with the lowest expected completion time;
//   - the original checkpoint shards (no placement): each expert is up to six tensor extents
//     on the shard files, all on one "drive" (the model directory).
// A placement with spine records (manifest version 3 and later) also serves the streamed spine: each
// spine tensor's record is read like an expert record (pieces to the holder expected to finish
// first, faults and checksums alike), at low priority; tensors without a usable record are read
// from their shard (read_shard).
// Faults: a piece that fails (short read, EIO, vanished file) marks its drive failed and is
// retried on another holder. Every placed record is checked on every read (XXH3 runs far above
// drive speed: k3-public-bench/results/record-checks.md): a record whose XXH3 does not match the
// manifest's, or an expert record holding a NaN or Inf weight or scale (a copy rewritten on the
// drive along with its checksum, or placed from a damaged checkpoint), is a bad copy: the drives
// it came from are marked suspect (and count it) and the record is read again from a holder
// whose copy has not been found bad. When no holder is left the read completes with one line
// naming the drive's file, the record and its offset. It never hangs: every read's callback
// runs exactly once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/drive_queue.hpp"
#include "weights/expert_record.hpp"
#include "weights/expert_table.hpp"
#include "weights/placement.hpp"

namespace deltafin {

struct ReaderOptions {
  bool bypass = true;              // O_DIRECT / F_NOCACHE
  int depth = 8;                   // reads in flight per drive
  uint64_t piece_bytes = 1 << 20;  // records larger than this are split (multiple of 4096)
};

class ExpertReader {
 public:
  using Done = std::function<void(std::exception_ptr)>;

  static std::unique_ptr<ExpertReader> from_shards(const WeightIndex& index, const ExpertTable& experts,
                                                   const ReaderOptions& options);
  // Refuses a placement made for other tensors or from shards that changed since (size or
  // modification time, naming the shard). Opens every drive's data file; a drive that cannot be
  // opened (or is too short) is marked failed, and opening fails naming it when some expert has
  // no other holder. A host's share of a placement (host_share, weights/placement.hpp) may lack
  // records: those experts are not readable here (holds() is false; a read of one completes with
  // "layer L expert E is not on this host's drives (placement P)"). Any other manifest must hold
  // every expert.
  static std::unique_ptr<ExpertReader> from_placement(const PlacementManifest& manifest, const std::string& manifest_path,
                                                      const WeightIndex& index, const ExpertTable& experts,
                                                      const ReaderOptions& options);
  ~ExpertReader();

  // Whether this reader can read (layer, expert): false only for an expert on other hosts' drives.
  bool holds(int64_t layer, int64_t expert) const { return !at(layer, expert).extents.empty(); }
  // Bytes of the buffer a record needs (payload rounded up to 4096).
  uint64_t buffer_bytes(int64_t layer, int64_t expert) const;
  const RecordLayout& layout(int64_t layer, int64_t expert) const;
  // Starts reading the record into dst (buffer_bytes, 4096-aligned); `done` runs once, on an I/O
  // thread, after the whole record has arrived (and, placed, been checked: its XXH3, and that
  // every weight and scale is finite) or with the error.
  // urgent: a demand read (served before prefetch reads). cancel (optional): once set, pieces
  // that have not started are skipped and `done` gets a ReadCancelled (io/drive_queue.hpp).
  void read(int64_t layer, int64_t expert, std::byte* dst, bool urgent, Done done,
            std::shared_ptr<const std::atomic<bool>> cancel = nullptr);

  // Reads `length` bytes of a checkpoint shard at `offset` into dst at low priority, around the page
  // cache (the streamed spine, io/spine_stream.hpp): on the shards' drive queue, or with a
  // placement on a queue of the model directory's own. `done` runs once, on an I/O thread.
  void read_shard(const ReadOnlyFile& file, uint64_t offset, uint64_t length, std::byte* dst, Done done);

  // Whether the placement holds a usable record of the spine tensor `name` (its full name).
  bool has_spine_record(const std::string& name) const { return spine_.count(name) > 0; }
  // Reads that record (the tensor's nbytes, no padding) into dst at low priority through the
  // drives' queues; `done` runs once, on an I/O thread, after it arrived (and its XXH3 was checked).
  void read_spine_record(const std::string& name, std::byte* dst, Done done);

  std::vector<DriveStats> drive_stats() const;
  // The queue read_shard goes through: with a placement the model directory's own, else drive 0.
  DriveStats shard_drive_stats() const;
  bool placed() const { return placed_; }

 private:
  struct Holder {
    int drive;
    const ReadOnlyFile* file;
    uint64_t offset;
  };
  struct Extent {
    uint64_t dst_offset, length;    // in the record buffer
    std::vector<Holder> holders;
  };
  struct Location {
    RecordLayout layout;
    std::vector<Extent> extents;
    uint64_t xxh3 = 0;  // placement only
  };
  struct Read;

  ExpertReader(const ExpertTable& experts, const ReaderOptions& options) : experts_(experts), options_(options) {}
  const Location& at(int64_t layer, int64_t expert) const;
  // Issues every piece of the record, avoiding the `excluded` drives.
  void issue_record(const std::shared_ptr<Read>& read, const std::vector<int>& excluded);
  void issue_piece(const std::shared_ptr<Read>& read, size_t extent, uint64_t begin, uint64_t length,
                   std::vector<int> tried, std::exception_ptr last_error = nullptr);
  void finish(const std::shared_ptr<Read>& read);
  // Completes a read of an expert this host's share does not hold, with the error.
  void not_here(const std::shared_ptr<Read>& read);
  // Why the placed record now in read.dst is a bad copy, or "" when it is good.
  std::string check_copy(const Read& read) const;
  // "drive 0 (<file>): <record> at offset <n>: <why>" for a bad copy on drive d.
  std::string describe_copy(const Read& read, int drive, const std::string& why) const;
  static std::string read_name(const Read& read);  // "expert 3/7 (layer/expert)", "spine tensor 'x'"

  const ExpertTable& experts_;
  ReaderOptions options_;
  bool placed_ = false;
  std::string placement_path_;  // the manifest's (placed only)
  std::vector<std::unique_ptr<ReadOnlyFile>> files_;
  std::vector<std::unique_ptr<DriveQueue>> drives_;
  std::unique_ptr<DriveQueue> shard_drive_;  // with a placement: the model directory's queue (spine reads)
  std::vector<std::vector<Location>> locations_;  // [layer][expert]
  std::unordered_map<std::string, Location> spine_;  // spine records by tensor name (placement only)
};

}  // namespace deltafin
