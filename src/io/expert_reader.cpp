// ExpertReader (see expert_reader.hpp).
#include "io/expert_reader.hpp"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>

#include "util/aligned_buffer.hpp"
#include "util/error.hpp"
#include "weights/finite_check.hpp"
#include "weights/spine_tensors.hpp"

namespace deltafin {

struct ExpertReader::Read {
  int64_t layer = 0, expert = 0;
  const std::string* tensor = nullptr;  // a spine record's tensor name (nullptr: an expert)
  const Location* loc = nullptr;
  std::byte* dst = nullptr;
  bool urgent = true;
  Done done;
  std::shared_ptr<const std::atomic<bool>> cancel;
  std::atomic<bool> skipped{false};  // a piece was skipped (cancelled)
  std::atomic<int> remaining{0};
  std::mutex mutex;
  std::exception_ptr error;
  std::vector<int> served;        // drives the current copy's pieces came from
  std::vector<std::pair<int, std::string>> bad_copies;  // drives whose copy failed its check, and why
};

namespace {

std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

ExpertReader::~ExpertReader() { drives_.clear(), shard_drive_.reset(); }  // joins the I/O threads before the files close

std::unique_ptr<ExpertReader> ExpertReader::from_shards(const WeightIndex& index, const ExpertTable& experts,
                                                        const ReaderOptions& options) {
  std::unique_ptr<ExpertReader> r(new ExpertReader(experts, options));
  r->drives_.push_back(std::make_unique<DriveQueue>(index.dir(), options.depth));
  r->locations_.resize(experts.layers());
  for (int64_t layer = 0; layer < experts.layers(); ++layer) {
    if (!experts.has(layer)) continue;
    for (int64_t e = 0; e < experts.experts(); ++e) {
      const ExpertRef& ref = experts.at(layer, e);
      Location loc;
      loc.layout = record_layout(ref);
      for (int part = 0; part < 6; ++part) {
        const TensorRef& t = record_part_tensor(ref, part);
        if (!t.info) continue;
        loc.extents.push_back({loc.layout.offset[part], t.info->nbytes, {{0, &index.shard_file(t.shard), t.info->offset}}});
      }
      r->locations_[layer].push_back(std::move(loc));
    }
  }
  return r;
}

std::unique_ptr<ExpertReader> ExpertReader::from_placement(const PlacementManifest& manifest,
                                                           const std::string& manifest_path, const WeightIndex& index,
                                                           const ExpertTable& experts, const ReaderOptions& options) {
  const std::string fingerprint = model_fingerprint(experts);
  if (manifest.model != fingerprint)
    fail("{}: placement made for a different model (fingerprint {}, this model {}); run `deltafin place` again",
         manifest_path, manifest.model, fingerprint);
  if (const auto changes = source_changes(manifest, placement_sources(index, experts, manifest.spine_tensor_names())); !changes.empty())
    fail("{}: stale placement: {}; run `deltafin place` again (`deltafin verify --against-shards` compares the records "
         "with the shards)", manifest_path, changes.front());
  std::unique_ptr<ExpertReader> r(new ExpertReader(experts, options));
  r->placed_ = true;
  r->placement_path_ = manifest_path;
  std::vector<std::string> unusable(manifest.drives.size());  // why a drive cannot be used ("" = fine)
  for (size_t d = 0; d < manifest.drives.size(); ++d) {
    try {
      r->files_.push_back(std::make_unique<ReadOnlyFile>(manifest.drives[d]));
    } catch (const Error& e) {
      r->files_.push_back(nullptr);
      unusable[d] = e.what();
    }
    r->drives_.push_back(std::make_unique<DriveQueue>(manifest.drives[d], options.depth));
  }
  r->shard_drive_ = std::make_unique<DriveQueue>(index.dir(), options.depth);
  for (const PlacedRecord& rec : manifest.records)
    for (const PlacementHolder& h : rec.holders)
      if (r->files_[h.drive] && unusable[h.drive].empty() &&
          h.offset + round_up(rec.payload, manifest.alignment) > r->files_[h.drive]->size())
        unusable[h.drive] = fmt::format("{}: shorter ({} bytes) than the manifest says (truncated?)",
                                        manifest.drives[h.drive], r->files_[h.drive]->size());
  for (const PlacedSpineRecord& rec : manifest.spine)
    for (const PlacementHolder& h : rec.holders)
      if (r->files_[h.drive] && unusable[h.drive].empty() &&
          h.offset + round_up(rec.payload, manifest.alignment) > r->files_[h.drive]->size())
        unusable[h.drive] = fmt::format("{}: shorter ({} bytes) than the manifest says (truncated?)",
                                        manifest.drives[h.drive], r->files_[h.drive]->size());
  // One file named by two drives (the same path twice, a bind mount, a hard link) is no replica.
  for (size_t d = 0; d < r->files_.size(); ++d)
    for (size_t e = 0; e < d; ++e)
      if (r->files_[d] && r->files_[e] && r->files_[d]->same_file(*r->files_[e]))
        fail("{}: drives {} ({}) and {} ({}) are one file (same device and inode); each drive needs its own",
             manifest_path, e, manifest.drives[e], d, manifest.drives[d]);
  for (size_t d = 0; d < unusable.size(); ++d)
    if (!unusable[d].empty()) r->drives_[d]->mark_failed();

  r->locations_.resize(experts.layers());
  for (int64_t layer = 0; layer < experts.layers(); ++layer) {
    if (!experts.has(layer)) continue;
    for (int64_t e = 0; e < experts.experts(); ++e) {
      const PlacedRecord* rec = manifest.find(layer, e);
      Location loc;
      loc.layout = record_layout(experts.at(layer, e));
      if (!rec && manifest.share_host >= 0) {  // on other hosts' drives: not readable here (no extents)
        r->locations_[layer].push_back(std::move(loc));
        continue;
      }
      if (!rec) fail("{}: no record for expert {}/{} (layer/expert); run `deltafin place` again", manifest_path, layer, e);
      if (rec->payload != loc.layout.payload)
        fail("{}: expert {}/{} has {} bytes, the model's tensors {}; run `deltafin place` again", manifest_path, layer,
             e, rec->payload, loc.layout.payload);
      loc.xxh3 = rec->xxh3;
      Extent extent{0, round_up(rec->payload, 4096), {}};
      for (const PlacementHolder& h : rec->holders)
        if (unusable[h.drive].empty()) extent.holders.push_back({h.drive, r->files_[h.drive].get(), h.offset});
      if (extent.holders.empty()) {
        const int d = rec->holders.front().drive;
        fail("drive {} ({}) cannot be used and holds {} only copy of expert {}/{} (layer/expert): {}", d,
             manifest.drives[d], manifest.share_host >= 0 ? "this host's" : "the", layer, e, unusable[d]);
      }
      loc.extents.push_back(std::move(extent));
      r->locations_[layer].push_back(std::move(loc));
    }
  }
  // Spine records: the tensor's bytes, read without padding (the buffer is the tensor's size). One
  // whose every holder is unusable is left out: its tensor is read from the shard.
  const auto tensors = tensors_by_name(index);
  for (const PlacedSpineRecord& rec : manifest.spine) {
    auto it = tensors.find(rec.tensor);
    if (it == tensors.end())
      fail("{}: spine tensor '{}' is not in the checkpoint; run `deltafin place` again", manifest_path, rec.tensor);
    if (it->second.info->nbytes != rec.payload)
      fail("{}: spine tensor '{}' has {} bytes placed, {} in the checkpoint; run `deltafin place` again", manifest_path,
           rec.tensor, rec.payload, it->second.info->nbytes);
    Location loc;
    loc.layout.payload = rec.payload;
    loc.xxh3 = rec.xxh3;
    Extent extent{0, rec.payload, {}};
    for (const PlacementHolder& h : rec.holders)
      if (unusable[h.drive].empty()) extent.holders.push_back({h.drive, r->files_[h.drive].get(), h.offset});
    if (extent.holders.empty()) continue;
    loc.extents.push_back(std::move(extent));
    r->spine_.emplace(rec.tensor, std::move(loc));
  }
  for (size_t d = 0; d < unusable.size(); ++d)
    if (!unusable[d].empty())
      spdlog::warn("drive {} ({}) cannot be used, reading its experts from other copies: {}", d, manifest.drives[d],
                   unusable[d]);
  return r;
}

const ExpertReader::Location& ExpertReader::at(int64_t layer, int64_t expert) const {
  return locations_[layer][expert];
}

uint64_t ExpertReader::buffer_bytes(int64_t layer, int64_t expert) const {
  return round_up(at(layer, expert).layout.payload, 4096);
}

const RecordLayout& ExpertReader::layout(int64_t layer, int64_t expert) const { return at(layer, expert).layout; }

std::string ExpertReader::read_name(const Read& read) {
  if (read.tensor) return fmt::format("spine tensor '{}'", *read.tensor);
  return fmt::format("expert {}/{} (layer/expert)", read.layer, read.expert);
}

void ExpertReader::read(int64_t layer, int64_t expert, std::byte* dst, bool urgent, Done done,
                        std::shared_ptr<const std::atomic<bool>> cancel) {
  auto read = std::make_shared<Read>();
  read->urgent = urgent;
  read->cancel = std::move(cancel);
  read->layer = layer;
  read->expert = expert;
  read->loc = &at(layer, expert);
  read->dst = dst;
  read->done = std::move(done);
  if (read->loc->extents.empty()) return not_here(read);
  issue_record(read, {});
}

// The error goes to `done` on an I/O thread, as every read's does: a job on the model directory's
// queue that is cancelled before it starts (it reads nothing) carries it there.
void ExpertReader::not_here(const std::shared_ptr<Read>& read) {
  auto error = std::make_exception_ptr(Error(fmt::format("layer {} expert {} is not on this host's drives (placement {})",
                                                         read->layer, read->expert, placement_path_)));
  ReadJob job;
  job.cancel = std::make_shared<std::atomic<bool>>(true);
  job.done = [read, error](std::exception_ptr) mutable { read->done(std::move(error)); };
  shard_drive_->submit(std::move(job));
}

void ExpertReader::read_spine_record(const std::string& name, std::byte* dst, Done done) {
  auto it = spine_.find(name);
  if (it == spine_.end()) fail("no placed record of spine tensor '{}'", name);
  auto read = std::make_shared<Read>();
  read->urgent = false;
  read->tensor = &it->first;
  read->loc = &it->second;
  read->dst = dst;
  read->done = std::move(done);
  issue_record(read, {});
}

void ExpertReader::issue_record(const std::shared_ptr<Read>& read, const std::vector<int>& excluded) {
  // Pieces: placed records split at piece_bytes; shard tensors are read whole.
  std::vector<std::tuple<size_t, uint64_t, uint64_t>> pieces;  // (extent, begin, length)
  for (size_t x = 0; x < read->loc->extents.size(); ++x) {
    const Extent& extent = read->loc->extents[x];
    const uint64_t step = placed_ ? std::max<uint64_t>(options_.piece_bytes, 4096) : extent.length;
    for (uint64_t begin = 0; begin < extent.length; begin += step)
      pieces.emplace_back(x, begin, std::min(step, extent.length - begin));
  }
  read->remaining = static_cast<int>(pieces.size());
  for (const auto& [x, begin, length] : pieces) issue_piece(read, x, begin, length, excluded);
}

void ExpertReader::issue_piece(const std::shared_ptr<Read>& read, size_t x, uint64_t begin, uint64_t length,
                               std::vector<int> tried, std::exception_ptr last_error) {
  const Extent& extent = read->loc->extents[x];
  // The untried holder expected to finish first, preferring drives that have not failed, then
  // drives that have not returned a bad checksum.
  const Holder* best = nullptr;
  double best_eta = std::numeric_limits<double>::infinity();
  int best_rank = 3;  // 0: healthy, 1: suspect, 2: failed
  for (const Holder& h : extent.holders) {
    if (std::find(tried.begin(), tried.end(), h.drive) != tried.end()) continue;
    const int rank = drives_[h.drive]->failed() ? 2 : drives_[h.drive]->suspect() ? 1 : 0;
    const double eta = drives_[h.drive]->expected_seconds(length);
    if (!best || rank < best_rank || (rank == best_rank && eta < best_eta)) {
      best = &h;
      best_eta = eta;
      best_rank = rank;
    }
  }
  if (!best) {  // every holder failed this piece: the record fails with the last drive's error
    {
      std::lock_guard lock(read->mutex);
      read->error = last_error;
    }
    if (--read->remaining == 0) finish(read);
    return;
  }
  tried.push_back(best->drive);
  {
    std::lock_guard lock(read->mutex);
    read->served.push_back(best->drive);
  }
  const Holder holder = *best;
  ReadJob job{holder.file, holder.offset + begin, length, read->dst + extent.dst_offset + begin, options_.bypass, read->urgent,
              read->cancel, {}};
  job.done = [this, read, x, begin, length, tried = std::move(tried), holder](std::exception_ptr error) {
    if (is_cancelled(error)) {  // not the drive's fault: the record completes as cancelled
      read->skipped = true;
      if (--read->remaining == 0) finish(read);
      return;
    }
    if (error) {
      DriveQueue& drive = *drives_[holder.drive];
      if (!drive.failed()) spdlog::warn("drive {} ({}) failed a read: {}", holder.drive, drive.name(), describe(error));
      drive.mark_failed();
      issue_piece(read, x, begin, length, tried,  // the next holder, or completion with this error
                  std::make_exception_ptr(Error(fmt::format("drive {} ({}): reading {} failed and no other drive holds it: {}",
                      holder.drive, drive.name(), read_name(*read), describe(error)))));
      return;
    }
    if (--read->remaining == 0) finish(read);
  };
  drives_[holder.drive]->submit(std::move(job));
}

void ExpertReader::finish(const std::shared_ptr<Read>& read) {
  std::exception_ptr error;
  {
    std::lock_guard lock(read->mutex);
    error = read->error;
  }
  if (!error && read->skipped) return read->done(std::make_exception_ptr(ReadCancelled()));
  const std::string why = !error && placed_ ? check_copy(*read) : "";
  if (!why.empty()) {
    const std::vector<Holder>& holders = read->loc->extents.front().holders;
    std::vector<int> served;
    {
      std::lock_guard lock(read->mutex);
      served.swap(read->served);
    }
    std::sort(served.begin(), served.end());
    served.erase(std::unique(served.begin(), served.end()), served.end());
    auto is_bad = [&](int d) {
      return std::any_of(read->bad_copies.begin(), read->bad_copies.end(), [&](const auto& b) { return b.first == d; });
    };
    for (int d : served) {  // the drives of the bad copy: suspect, and not asked for this record again
      drives_[d]->mark_suspect();
      if (!is_bad(d)) read->bad_copies.emplace_back(d, why);
    }
    const Holder* next = nullptr;  // a holder whose copy has not been found bad
    for (const Holder& h : holders)
      if (!next && !is_bad(h.drive)) next = &h;
    if (next) {  // read the whole record again from that one holder
      std::vector<int> others;
      for (const Holder& h : holders)
        if (h.drive != next->drive) others.push_back(h.drive);
      spdlog::warn("{}; reading it again from drive {} ({})", describe_copy(*read, served.front(), why), next->drive,
                   drives_[next->drive]->name());
      issue_record(read, others);
      return;
    }
    std::string copies;
    for (const auto& [d, reason] : read->bad_copies) copies += (copies.empty() ? "" : "; ") + describe_copy(*read, d, reason);
    error = std::make_exception_ptr(
        Error(fmt::format("{}; no holder has a good copy (corrupt placement; run `deltafin verify`)", copies)));
  }
  read->done(error);
}

std::string ExpertReader::check_copy(const Read& read) const {
  const Location& loc = *read.loc;
  if (XXH3_64bits(read.dst, loc.layout.payload) != loc.xxh3) return "checksum mismatch";
  if (read.tensor) return "";  // a spine tensor: SpineStream checks its values
  const ExpertRef& ref = experts_.at(read.layer, read.expert);
  const std::array<WeightView, 3> views = record_views(ref, loc.layout, read.dst);
  for (int p = 0; p < 3; ++p)
    if (const auto bad = find_non_finite(views[p])) {
      const TensorRef& t = bad->in_scales ? ref.proj[p].scale : ref.proj[p].weight;
      return fmt::format("NaN or Inf in tensor '{}' at element {} although the checksum matches (the copy and its "
                         "checksum were rewritten, or it was placed from a damaged checkpoint)", t.info->name, bad->index);
    }
  return "";
}

std::string ExpertReader::describe_copy(const Read& read, int drive, const std::string& why) const {
  uint64_t offset = 0;
  for (const Holder& h : read.loc->extents.front().holders)
    if (h.drive == drive) offset = h.offset;
  return fmt::format("drive {} ({}): {} at offset {}: {}", drive, drives_[drive]->name(), read_name(read), offset, why);
}

// In pieces of piece_bytes, so that the I/O threads' bounce buffers (unaligned shard extents under
// O_DIRECT) stay a piece each; `done` runs after the last piece, with the first error.
void ExpertReader::read_shard(const ReadOnlyFile& file, uint64_t offset, uint64_t length, std::byte* dst, Done done) {
  struct Pieces {
    std::mutex mutex;
    int remaining = 0;
    std::exception_ptr error;
    Done done;
  };
  auto pieces = std::make_shared<Pieces>();
  pieces->done = std::move(done);
  const uint64_t step = std::max<uint64_t>(options_.piece_bytes, 4096);
  pieces->remaining = static_cast<int>(std::max<uint64_t>(1, (length + step - 1) / step));
  DriveQueue& queue = placed_ ? *shard_drive_ : *drives_[0];
  for (uint64_t begin = 0; begin < std::max<uint64_t>(length, 1); begin += step) {
    ReadJob job;
    job.file = &file, job.offset = offset + begin, job.length = std::min(step, length - begin), job.dst = dst + begin;
    job.bypass = options_.bypass, job.urgent = false;
    job.done = [pieces](std::exception_ptr e) {
      std::unique_lock lock(pieces->mutex);
      if (e && !pieces->error) pieces->error = e;
      if (--pieces->remaining > 0) return;
      lock.unlock();
      pieces->done(pieces->error);
    };
    queue.submit(std::move(job));
  }
}

std::vector<DriveStats> ExpertReader::drive_stats() const {
  std::vector<DriveStats> out;
  for (const auto& d : drives_) out.push_back(d->stats());
  return out;
}

DriveStats ExpertReader::shard_drive_stats() const { return (placed_ ? shard_drive_ : drives_[0])->stats(); }

}  // namespace deltafin
