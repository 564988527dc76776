// Placement planning, writing (with resume) and verification (see placer.hpp).
#include "io/placer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "util/aligned_buffer.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/human_bytes.hpp"
#include "util/input_file.hpp"
#include "util/read_only_file.hpp"
#include "weights/expert_record.hpp"
#include "weights/finite_check.hpp"
#include "weights/spine_tensors.hpp"

namespace deltafin {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kAlignment = 4096;
constexpr uint64_t kSyncEvery = 256 << 20;  // journal a batch of records after this many bytes
constexpr const char* kJournalMagic = "deltafin-place-journal 1";
constexpr uint64_t kSpineChunk = 64 << 20;  // a spine record is copied and checked in pieces this large

template <class Record>
uint64_t padded(const Record& r) { return round_up(r.payload, kAlignment); }

// Bytes each drive's data file needs.
std::vector<uint64_t> drive_sizes(const PlacementManifest& m) {
  std::vector<uint64_t> size(m.drives.size(), 0);
  for (const PlacedRecord& r : m.records)
    for (const PlacementHolder& h : r.holders) size[h.drive] = std::max(size[h.drive], h.offset + padded(r));
  for (const PlacedSpineRecord& r : m.spine)
    for (const PlacementHolder& h : r.holders) size[h.drive] = std::max(size[h.drive], h.offset + padded(r));
  return size;
}

// Every spine record's tensor in the checkpoint; throws naming the tensor when one is absent.
std::vector<TensorRef> spine_sources(const WeightIndex& index, const PlacementManifest& m) {
  const auto by_name = tensors_by_name(index);
  std::vector<TensorRef> out;
  for (const PlacedSpineRecord& r : m.spine) {
    auto it = by_name.find(r.tensor);
    if (it == by_name.end()) fail("{}: spine tensor '{}' is not in the checkpoint", index.dir(), r.tensor);
    out.push_back(it->second);
  }
  return out;
}

// XXH3 of a spine tensor's bytes, read from its shard in chunks; `each` sees every chunk
// (padded(record) bytes in all: the tensor, then zeros).
uint64_t stream_tensor(const WeightIndex& index, const TensorRef& t, uint64_t padded_bytes, AlignedBuffer& chunk,
                       const std::function<void(const std::byte*, uint64_t, uint64_t)>& each) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (uint64_t pos = 0; pos < padded_bytes; pos += chunk.size()) {
    const uint64_t length = std::min<uint64_t>(chunk.size(), padded_bytes - pos);
    const uint64_t data = pos < t.info->nbytes ? std::min(length, t.info->nbytes - pos) : 0;
    std::memset(chunk.data() + data, 0, length - data);
    if (data) index.shard_file(t.shard).read_exact(chunk.data(), data, t.info->offset + pos);
    XXH3_64bits_update(state, chunk.data(), data);
    if (each) each(chunk.data(), length, pos);
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

// XXH3 of the first `payload` bytes of a record on a drive, read around the page cache in chunks.
uint64_t hash_on_drive(const ReadOnlyFile& file, uint64_t offset, uint64_t payload, AlignedBuffer& chunk) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  try {
    for (uint64_t pos = 0; pos < payload; pos += chunk.size()) {
      const uint64_t length = std::min<uint64_t>(chunk.size(), round_up(payload, kAlignment) - pos);
      file.read_uncached(chunk.data(), length, offset + pos);
      XXH3_64bits_update(state, chunk.data(), std::min(length, payload - pos));
    }
  } catch (...) {
    XXH3_freeState(state);
    throw;
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

void write_all(int fd, const std::byte* data, uint64_t size, uint64_t offset, const std::string& path) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail("{}: write of {} bytes at offset {} failed: {}{}", path, size, offset, std::strerror(n < 0 ? errno : EIO),
           n < 0 && errno == ENOSPC ? " (free some space and run the same `deltafin place` again: it reuses this file)" : "");
    done += static_cast<uint64_t>(n);
  }
}

void sync_or_fail(int fd, const std::string& path) {
  if (::fdatasync(fd) != 0) fail("{}: sync failed: {}", path, std::strerror(errno));
}

// Bytes the filesystem has allocated to `path` (0 when it does not exist).
uint64_t allocated_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

// Fails before anything is written when a filesystem cannot hold what the drives on it still
// need: the data files' sizes, less what this plan's own `.partial` files from an interrupted run
// (a full disk, a kill) already hold, since they are reused or truncated. Drives on one
// filesystem are counted together.
void require_space(const std::vector<std::string>& drives, const std::vector<std::string>& partial,
                   const std::vector<uint64_t>& sizes) {
  struct Filesystem {
    dev_t device;
    uint64_t free, needed;
    std::vector<size_t> drives;
  };
  std::vector<Filesystem> filesystems;
  for (size_t d = 0; d < drives.size(); ++d) {
    const std::string dir = fs::path(drives[d]).parent_path().string();
    struct stat st {};
    struct statvfs vfs {};
    if (::stat(dir.c_str(), &st) != 0 || ::statvfs(dir.c_str(), &vfs) != 0) continue;  // opening the file will say why
    auto it = std::find_if(filesystems.begin(), filesystems.end(), [&](const Filesystem& f) { return f.device == st.st_dev; });
    if (it == filesystems.end())
      it = filesystems.insert(filesystems.end(), {st.st_dev, static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize, 0, {}});
    it->needed += sizes[d] - std::min(sizes[d], allocated_bytes(partial[d]));
    it->drives.push_back(d);
  }
  for (const Filesystem& f : filesystems) {
    if (f.needed <= f.free) continue;
    if (f.drives.size() == 1)
      fail("drive {} ({}): needs {} more, only {} free", f.drives[0], drives[f.drives[0]], human_bytes(f.needed),
           human_bytes(f.free));
    std::string names;
    for (size_t d : f.drives) names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", d, fs::path(drives[d]).parent_path().string());
    fail("drives {} are on one filesystem: together they need {} more, only {} free", names, human_bytes(f.needed),
         human_bytes(f.free));
  }
}

// Records already written by an interrupted run of the same plan: index -> xxh3.
std::map<size_t, uint64_t> read_journal(const std::string& path, uint64_t plan_hash) {
  std::map<size_t, uint64_t> done;
  require_regular_file(path, "the placement journal");
  std::ifstream in(path);
  std::string magic, hash;
  if (!in || !std::getline(in, magic) || magic != kJournalMagic || !std::getline(in, hash) ||
      hash != fmt::format("{:016x}", plan_hash))
    return done;
  size_t index;
  std::string sum;
  while (in >> index >> sum) done[index] = std::stoull(sum, nullptr, 16);
  return done;
}

// Fills buffer (padded(record) bytes) with the record of `ref` read from the shards: every part
// at its layout offset, zeros between and after.
void assemble_record(const WeightIndex& index, const ExpertRef& ref, std::byte* buffer, uint64_t padded_bytes) {
  const RecordLayout layout = record_layout(ref);
  std::memset(buffer, 0, padded_bytes);
  for (int part = 0; part < 6; ++part)
    if (const TensorRef& t = record_part_tensor(ref, part); t.info) index.read(t, buffer + layout.offset[part]);
}

// "NaN or Inf in tensor 'x' at element i" for a placed record of `r`'s expert holding one, else
// "" (also for a record this checkpoint has no expert of: verify_against_shards names those).
std::string non_finite_part(const ExpertTable& experts, const PlacedRecord& r, const std::byte* record) {
  if (!experts.has(r.layer) || r.expert >= experts.experts()) return "";
  const ExpertRef& ref = experts.at(r.layer, r.expert);
  const RecordLayout layout = record_layout(ref);
  if (layout.payload != r.payload) return "";
  const std::array<WeightView, 3> views = record_views(ref, layout, record);
  for (int p = 0; p < 3; ++p)
    if (const auto bad = find_non_finite(views[p]))
      return fmt::format("NaN or Inf in tensor '{}' at element {}", (bad->in_scales ? ref.proj[p].scale : ref.proj[p].weight).info->name,
                         bad->index);
  return "";
}

// Refuses an expert holding a NaN or Inf weight or scale, naming its shard and tensor: a placed
// record is finite, so a reader that finds otherwise blames the drive's copy.
void require_finite_record(const WeightIndex& index, const ExpertRef& ref, const std::byte* record) {
  const std::array<WeightView, 3> views = record_views(ref, record_layout(ref), record);
  for (int p = 0; p < 3; ++p)
    if (const auto bad = find_non_finite(views[p])) {
      const TensorRef& t = bad->in_scales ? ref.proj[p].scale : ref.proj[p].weight;
      fail("{}: tensor '{}' holds NaN or Inf at element {} (corrupt checkpoint?); nothing is placed from a damaged "
           "checkpoint", index.shard_path(t.shard), t.info->name, bad->index);
    }
}

}  // namespace

PlacementManifest plan_placement(const ExpertTable& experts, const PlacementPlanOptions& o) {
  const size_t drives = o.drive_dirs.size();
  if (drives == 0) fail("--drive: give at least one drive directory");
  if (drives > 256) fail("--drive: at most 256 drives");
  if (!(o.replicate >= 0 && o.replicate <= 1)) fail("--replicate must be between 0 and 1 (got {})", o.replicate);
  if (o.replicate > 0 && o.replicate < 1 && !o.usage)
    fail("--replicate {} needs --usage FILE (which experts are used most?); --replicate 1 copies every expert", o.replicate);
  if (o.hosts < 1) fail("--hosts must be at least 1 (got {})", o.hosts);
  const size_t hosts = static_cast<size_t>(o.hosts);
  if (drives % hosts)
    fail("--hosts {}: the {} --drive directories must split into {} equal groups, one per host in order (give a multiple "
         "of {} drives)", hosts, drives, hosts, hosts);
  const size_t per_host = drives / hosts;  // host h has drives h * per_host ... (h + 1) * per_host - 1
  std::vector<double> host_weight = o.host_weights.empty() ? std::vector<double>(hosts, 1.0) : o.host_weights;
  if (host_weight.size() != hosts ||
      std::any_of(host_weight.begin(), host_weight.end(), [](double w) { return !(w > 0 && std::isfinite(w)); }))
    fail("--host-weights: give {} positive numbers separated by commas, one per host (--hosts {})", hosts, hosts);
  if (!(o.replicate_hosts >= 0 && o.replicate_hosts <= 1))
    fail("--replicate-hosts must be between 0 and 1 (got {})", o.replicate_hosts);
  if (o.replicate_hosts > 0 && hosts < 2) fail("--replicate-hosts copies experts to every host: it needs --hosts 2 or more");
  if (o.replicate_hosts > 0 && o.replicate_hosts < 1 && !o.usage)
    fail("--replicate-hosts {} needs --usage FILE (which experts are used most?); --replicate-hosts 1 copies every expert "
         "to every host", o.replicate_hosts);
  PlacementManifest m;
  m.model = model_fingerprint(experts);
  m.alignment = kAlignment;
  std::vector<fs::path> dirs;
  std::vector<std::pair<dev_t, ino_t>> ids;  // a bind mount or a second name has another path, the same (device, inode)
  for (const std::string& given : o.drive_dirs) {
    if (!fs::is_directory(given)) fail("--drive {}: not a directory", given);
    dirs.push_back(fs::weakly_canonical(given));
    if (std::count(dirs.begin(), dirs.end(), dirs.back()) > 1) fail("--drive {}: given twice", given);
    struct stat st {};
    if (::stat(given.c_str(), &st) != 0) fail("--drive {}: {}", given, std::strerror(errno));
    for (size_t d = 0; d < ids.size(); ++d)
      if (ids[d] == std::pair{st.st_dev, st.st_ino})
        fail("--drive {} and --drive {} are one directory (same device and inode: a bind mount or another name for it); "
             "each drive needs its own", o.drive_dirs[d], given);
    ids.emplace_back(st.st_dev, st.st_ino);
  }

  for (int64_t layer = 0; layer < experts.layers(); ++layer)
    if (experts.has(layer))
      for (int64_t e = 0; e < experts.experts(); ++e)
        m.records.push_back({layer, e, record_layout(experts.at(layer, e)).payload, 0, {}});
  auto weight = [&](const PlacedRecord& r) { return o.usage ? static_cast<double>((*o.usage)[r.layer][r.expert]) : 1.0; };
  std::vector<size_t> order(m.records.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weight(m.records[a]) > weight(m.records[b]); });
  const size_t replicated = static_cast<size_t>(std::llround(o.replicate * static_cast<double>(order.size())));
  const size_t replicated_hosts = static_cast<size_t>(std::llround(o.replicate_hosts * static_cast<double>(order.size())));

  // Each primary goes to the host whose expected reads of that layer, with this expert's added,
  // are least for its weight, then the one with the fewest bytes for its weight; the most used
  // `replicate_hosts` fraction also gets a copy on every other host, each copy expected to serve
  // an equal part of the reads. On each of its hosts the record goes to the drive with the least
  // expected reads of that layer, then the fewest bytes (and the most used `replicate` fraction to
  // every drive of the host).
  std::vector<std::vector<double>> layer_load(experts.layers(), std::vector<double>(drives, 0));
  std::vector<std::vector<double>> host_load(experts.layers(), std::vector<double>(hosts, 0));
  std::vector<uint64_t> bytes(drives, 0), host_bytes(hosts, 0);
  for (size_t rank = 0; rank < order.size(); ++rank) {
    PlacedRecord& r = m.records[order[rank]];
    const double reads = weight(r) + 1;
    const std::vector<double>& load = host_load[r.layer];
    const auto host_key = [&](size_t h) {
      return std::pair{(load[h] + reads) / host_weight[h], static_cast<double>(host_bytes[h]) / host_weight[h]};
    };
    size_t home = 0;
    for (size_t h = 1; h < hosts; ++h)
      if (host_key(h) < host_key(home)) home = h;
    std::vector<size_t> on{home};
    for (size_t h = 0; h < hosts; ++h)
      if (rank < replicated_hosts && h != home) on.push_back(h);
    const double share = reads / static_cast<double>(on.size());
    for (size_t h : on) {
      host_load[r.layer][h] += share;
      host_bytes[h] += padded(r);
      const size_t first = h * per_host, end = first + per_host;
      size_t best = first;
      for (size_t d = first + 1; d < end; ++d)
        if (std::pair{layer_load[r.layer][d], bytes[d]} < std::pair{layer_load[r.layer][best], bytes[best]}) best = d;
      r.holders.push_back({static_cast<int>(best), 0});
      if (rank < replicated) {
        for (size_t d = first; d < end; ++d) {
          if (d != best) r.holders.push_back({static_cast<int>(d), 0});
          layer_load[r.layer][d] += share / static_cast<double>(per_host);
          bytes[d] += padded(r);
        }
      } else {
        layer_load[r.layer][best] += share;
        bytes[best] += padded(r);
      }
    }
  }
  // Spine records, on host 0's drives (rank 0 streams the spine): each on the drive with the
  // fewest spine bytes so far (then the fewest bytes), on every drive of host 0 when anything is
  // replicated.
  std::vector<uint64_t> spine_bytes(drives, 0);
  for (const TensorRef& t : o.spine) {
    PlacedSpineRecord r{t.info->name, t.info->nbytes, 0, {}};
    size_t best = 0;
    for (size_t d = 1; d < per_host; ++d)
      if (std::pair{spine_bytes[d], bytes[d]} < std::pair{spine_bytes[best], bytes[best]}) best = d;
    r.holders.push_back({static_cast<int>(best), 0});
    for (size_t d = 0; d < per_host; ++d)
      if (o.replicate > 0 && d != best) r.holders.push_back({static_cast<int>(d), 0});
    for (const PlacementHolder& h : r.holders) spine_bytes[h.drive] += padded(r), bytes[h.drive] += padded(r);
    m.spine.push_back(std::move(r));
  }
  if (hosts > 1)
    for (size_t d = 0; d < drives; ++d) m.drive_hosts.push_back(static_cast<int>(d / per_host));
  // Records lie on each drive in (layer, expert) order, then the spine records in checkpoint order.
  std::vector<uint64_t> cursor(drives, 0);
  std::string layout;
  for (const fs::path& dir : dirs) layout += dir.string() + '\n';
  for (PlacedRecord& r : m.records)
    for (PlacementHolder& h : r.holders) {
      h.offset = cursor[h.drive];
      cursor[h.drive] += padded(r);
      layout += fmt::format("{} {} {} {}\n", r.layer, r.expert, h.drive, h.offset);
    }
  for (PlacedSpineRecord& r : m.spine)
    for (PlacementHolder& h : r.holders) {
      h.offset = cursor[h.drive];
      cursor[h.drive] += padded(r);
      layout += fmt::format("{} {} {}\n", r.tensor, h.drive, h.offset);
    }
  // Data files are named after the model and this layout: another placement of the same model
  // on the same drive never overwrites them, and the same plan finds its own files to resume.
  const std::string name = fmt::format("deltafin-experts-{}-{:08x}.bin", m.model,
                                       XXH3_64bits(layout.data(), layout.size()) & 0xFFFFFFFF);
  for (const fs::path& dir : dirs) m.drives.push_back((dir / name).string());
  return m;
}

void write_placement(const WeightIndex& index, const ExpertTable& experts, PlacementManifest plan,
                     const std::string& manifest_path, const std::function<void(const PlaceProgress&)>& progress) {
  // One `place` at a time per manifest: a second would truncate the first one's partial files.
  const std::string lock_path = manifest_path + ".lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) fail("{}: cannot create the lock: {}", lock_path, std::strerror(errno));
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    fail("{}: another `deltafin place` is writing this placement (its lock {} is held)", manifest_path, lock_path);
  }
  struct Unlock {
    int fd;
    std::string path;
    ~Unlock() { ::unlink(path.c_str()), ::close(fd); }  // unlinked while still held
  } unlock{lock_fd, lock_path};
  OutputFile manifest_out(manifest_path);  // before the data: a wrong directory fails at once
  plan.sources = placement_sources(index, experts, plan.spine_tensor_names());  // part of the plan: changed shards restart a resume
  const std::vector<TensorRef> spine = spine_sources(index, plan);
  const uint64_t plan_hash = XXH3_64bits(placement_json(plan).data(), placement_json(plan).size());
  const std::string journal_path = manifest_path + ".journal";
  const std::vector<uint64_t> sizes = drive_sizes(plan);
  std::vector<std::string> partial(plan.drives.size());
  bool partials_exist = true;
  for (size_t d = 0; d < plan.drives.size(); ++d) {
    partial[d] = plan.drives[d] + ".partial";
    partials_exist = partials_exist && fs::exists(partial[d]);
  }
  std::map<size_t, uint64_t> done = partials_exist ? read_journal(journal_path, plan_hash) : std::map<size_t, uint64_t>{};

  std::vector<int> fds(plan.drives.size(), -1);
  auto close_all = [&] {
    for (int& fd : fds)
      if (fd >= 0) ::close(fd), fd = -1;
  };
  try {
    require_space(plan.drives, partial, sizes);
    for (size_t d = 0; d < plan.drives.size(); ++d) {
      fds[d] = ::open(partial[d].c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (done.empty() ? O_TRUNC : 0), 0644);
      if (fds[d] < 0) fail("drive {} ({}): cannot write: {}", d, partial[d], std::strerror(errno));
      if (::ftruncate(fds[d], static_cast<off_t>(sizes[d])) != 0)
        fail("drive {} ({}): cannot size the file: {}", d, partial[d], std::strerror(errno));
    }
    std::ofstream journal;
    if (done.empty()) {
      journal.open(journal_path, std::ios::trunc);
      journal << kJournalMagic << '\n' << fmt::format("{:016x}", plan_hash) << '\n';
    } else {
      journal.open(journal_path, std::ios::app);
    }
    if (!journal) fail("{}: cannot write the placement journal", journal_path);
    journal.flush();

    PlaceProgress p;
    p.records_total = plan.records.size() + plan.spine.size();
    uint64_t largest = 0;
    for (const PlacedRecord& r : plan.records) largest = std::max(largest, padded(r));
    AlignedBuffer buffer(largest);
    std::vector<size_t> unsynced;
    uint64_t unsynced_bytes = 0;
    auto sync_batch = [&] {
      for (size_t d = 0; d < fds.size(); ++d) sync_or_fail(fds[d], partial[d]);
      for (size_t i : unsynced)
        journal << i << ' '
                << fmt::format("{:016x}", i < plan.records.size() ? plan.records[i].xxh3 : plan.spine[i - plan.records.size()].xxh3)
                << '\n';
      journal.flush();
      if (!journal) fail("{}: cannot write the placement journal", journal_path);
      unsynced.clear();
      unsynced_bytes = 0;
    };
    for (size_t i = 0; i < plan.records.size(); ++i) {
      PlacedRecord& r = plan.records[i];
      if (auto it = done.find(i); it != done.end()) {
        r.xxh3 = it->second;
        ++p.records_resumed;
      } else {
        assemble_record(index, experts.at(r.layer, r.expert), buffer.data(), padded(r));
        require_finite_record(index, experts.at(r.layer, r.expert), buffer.data());
        r.xxh3 = XXH3_64bits(buffer.data(), r.payload);
        for (const PlacementHolder& h : r.holders) write_all(fds[h.drive], buffer.data(), padded(r), h.offset, partial[h.drive]);
        unsynced.push_back(i);
        unsynced_bytes += padded(r) * r.holders.size();
        p.bytes_written += padded(r) * r.holders.size();
        if (unsynced_bytes >= kSyncEvery) sync_batch();
      }
      ++p.records_done;
      if (progress) progress(p);
    }
    // Spine records: journal indices follow the expert records'.
    AlignedBuffer chunk(kSpineChunk);
    for (size_t s = 0; s < plan.spine.size(); ++s) {
      PlacedSpineRecord& r = plan.spine[s];
      const size_t i = plan.records.size() + s;
      if (auto it = done.find(i); it != done.end()) {
        r.xxh3 = it->second;
        ++p.records_resumed;
      } else {
        r.xxh3 = stream_tensor(index, spine[s], padded(r), chunk, [&](const std::byte* data, uint64_t length, uint64_t pos) {
          for (const PlacementHolder& h : r.holders) write_all(fds[h.drive], data, length, h.offset + pos, partial[h.drive]);
        });
        unsynced.push_back(i);
        unsynced_bytes += padded(r) * r.holders.size();
        p.bytes_written += padded(r) * r.holders.size();
        if (unsynced_bytes >= kSyncEvery) sync_batch();
      }
      ++p.records_done;
      if (progress) progress(p);
    }
    sync_batch();
    close_all();
    for (size_t d = 0; d < plan.drives.size(); ++d)
      if (std::rename(partial[d].c_str(), plan.drives[d].c_str()) != 0)
        fail("drive {} ({}): cannot rename the finished data file: {}", d, plan.drives[d], std::strerror(errno));
    manifest_out.write(placement_json(plan));
    fs::remove(journal_path);
  } catch (...) {
    close_all();
    throw;
  }
}

std::vector<VerifyFailure> verify_placement(const PlacementManifest& m, const ExpertTable& experts,
                                            const std::function<void(uint64_t)>& progress) {
  std::vector<VerifyFailure> failures;
  std::vector<std::unique_ptr<ReadOnlyFile>> files(m.drives.size());
  std::vector<std::string> why(m.drives.size());
  for (size_t d = 0; d < m.drives.size(); ++d) {
    try {
      files[d] = std::make_unique<ReadOnlyFile>(m.drives[d]);
    } catch (const Error& e) {
      why[d] = e.what();
      failures.push_back({-1, -1, static_cast<int>(d), fmt::format("drive {}: {}", d, e.what())});
    }
  }
  uint64_t largest = 0;
  for (const PlacedRecord& r : m.records) largest = std::max(largest, padded(r));
  AlignedBuffer buffer(largest);
  uint64_t checked = 0;
  for (const PlacedRecord& r : m.records) {
    for (const PlacementHolder& h : r.holders) {
      if (!files[h.drive]) continue;
      try {
        files[h.drive]->read_uncached(buffer.data(), padded(r), h.offset);
        const auto where = [&] {
          return fmt::format("drive {} ({}): expert {}/{} (layer/expert) at offset {}", h.drive, m.drives[h.drive], r.layer,
                             r.expert, h.offset);
        };
        if (XXH3_64bits(buffer.data(), r.payload) != r.xxh3)
          failures.push_back({r.layer, r.expert, h.drive, where() + ": checksum mismatch"});
        else if (const std::string bad = non_finite_part(experts, r, buffer.data()); !bad.empty())
          failures.push_back({r.layer, r.expert, h.drive, where() + ": " + bad + " although the checksum matches"});
      } catch (const Error& e) {
        failures.push_back({r.layer, r.expert, h.drive, fmt::format("drive {}: expert {}/{}: {}", h.drive, r.layer, r.expert, e.what())});
      }
    }
    if (progress) progress(++checked);
  }
  AlignedBuffer chunk(kSpineChunk);
  for (const PlacedSpineRecord& r : m.spine) {
    for (const PlacementHolder& h : r.holders) {
      if (!files[h.drive]) continue;
      try {
        if (hash_on_drive(*files[h.drive], h.offset, r.payload, chunk) != r.xxh3)
          failures.push_back({-1, -1, h.drive,
                              fmt::format("drive {} ({}): spine tensor '{}' at offset {}: checksum mismatch", h.drive,
                                          m.drives[h.drive], r.tensor, h.offset)});
      } catch (const Error& e) {
        failures.push_back({-1, -1, h.drive, fmt::format("drive {}: spine tensor '{}': {}", h.drive, r.tensor, e.what())});
      }
    }
    if (progress) progress(++checked);
  }
  return failures;
}

std::vector<VerifyFailure> verify_against_shards(const PlacementManifest& m, const WeightIndex& index,
                                                 const ExpertTable& experts, const std::function<void(uint64_t)>& progress) {
  std::vector<VerifyFailure> failures;
  uint64_t largest = 0;
  for (const PlacedRecord& r : m.records) largest = std::max(largest, padded(r));
  AlignedBuffer buffer(largest);
  uint64_t checked = 0;
  for (const PlacedRecord& r : m.records) {
    if (!experts.has(r.layer) || r.expert >= experts.experts()) {
      failures.push_back({r.layer, r.expert, -1, fmt::format("expert {}/{} (layer/expert) is not in the checkpoint", r.layer, r.expert)});
    } else if (const ExpertRef& ref = experts.at(r.layer, r.expert); record_layout(ref).payload != r.payload) {
      failures.push_back({r.layer, r.expert, -1,
                          fmt::format("expert {}/{} (layer/expert) has {} bytes placed, {} in the checkpoint", r.layer,
                                      r.expert, r.payload, record_layout(ref).payload)});
    } else {
      assemble_record(index, ref, buffer.data(), padded(r));
      if (XXH3_64bits(buffer.data(), r.payload) != r.xxh3) {
        const TensorRef& first = record_part_tensor(ref, 0);
        failures.push_back({r.layer, r.expert, -1,
                            fmt::format("{}: expert {}/{} (layer/expert, tensor '{}' and its parts) differs from its placed "
                                        "record: the checkpoint changed after placing",
                                        index.shard_path(first.shard), r.layer, r.expert, first.info->name)});
      }
    }
    if (progress) progress(++checked);
  }
  const auto by_name = tensors_by_name(index);
  AlignedBuffer chunk(kSpineChunk);
  for (const PlacedSpineRecord& r : m.spine) {
    auto it = by_name.find(r.tensor);
    if (it == by_name.end()) {
      failures.push_back({-1, -1, -1, fmt::format("spine tensor '{}' is not in the checkpoint", r.tensor)});
    } else if (it->second.info->nbytes != r.payload) {
      failures.push_back({-1, -1, -1, fmt::format("{}: spine tensor '{}' has {} bytes placed, {} in the checkpoint",
                                                  index.shard_path(it->second.shard), r.tensor, r.payload, it->second.info->nbytes)});
    } else if (stream_tensor(index, it->second, r.payload, chunk, nullptr) != r.xxh3) {
      failures.push_back({-1, -1, -1, fmt::format("{}: spine tensor '{}' differs from its placed record: the checkpoint "
                                                  "changed after placing", index.shard_path(it->second.shard), r.tensor)});
    }
    if (progress) progress(++checked);
  }
  return failures;
}

}  // namespace deltafin
