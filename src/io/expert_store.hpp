// The expert store: every routed-expert byte reaches the model through here, and all expert
// memory (cached, being read, in use) lives inside one byte budget that is never exceeded.
//   request(layer, experts): the union a pass needs, ascending; reads of the misses start at once
//     (as far as the budget allows; the rest start as room frees, in the same order).
//   acquire(layer, expert): waits for that expert and pins it while the handle lives (the
//     backend holds the handle until the commands reading the expert have completed);
//     acquire_next(layer, experts): the same for whichever of them is in memory first (the
//     expert op runs experts in the order their reads land).
// Memory: one slot pool (io/slot_pool.hpp) of budget / slot bytes slots; reads land in the slots
//   (io/landing.hpp). Where the host cannot write the pool (CUDA: the slots are device memory),
//   reads land in a few staging slots of pinned host memory instead (at most kStagingSlots;
//   outside the budget, which is the device's) and the reader's thread copies each record into
//   its slot before the expert counts as ready; the staging slots also bound the reads in flight.
//   prefetch(layer, experts, cap): speculative reads (router lookahead) that only take room from
//     experts needed later than the prefetched ones; when that layer's request comes, the reads
//     of guesses it did not choose that have not started yet are cancelled.
//   demote(layer, experts): experts only rejected drafts used go to the cold end.
// Eviction keeps what the current pass still needs (wanted or pinned) and otherwise follows the
// cache policy (io/cache_policy.hpp). A pass reads each expert at most once (counted).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cpu/weight_view.hpp"
#include "io/cache_policy.hpp"
#include "io/expert_reader.hpp"
#include "io/landing.hpp"
#include "io/slot_pool.hpp"
#include "util/aligned_buffer.hpp"
#include "weights/expert_table.hpp"

namespace deltafin {

// An expert held in a slot of the pool.
struct ExpertWeights {
  int64_t slot = -1;
  int64_t staging = -1;                 // the staging slot while it is read (device pools only)
  uint64_t offset = 0;                  // bytes into the pool's buffer where the record starts
  // Where the record landed on the host (all three projections and scales), and views of it:
  // gate [inter, hidden], up [inter, hidden], down [hidden, inter]. Staged records: the staging
  // slot, reused once uploaded, so only offsets from `record` mean anything then.
  const std::byte* record = nullptr;
  std::array<WeightView, 3> proj;
  uint64_t bytes = 0;                   // tensor bytes (the record's payload)
  uint64_t resident_bytes = 0;          // memory held (one slot: what the budget counts)
};

using ExpertHandle = std::shared_ptr<const ExpertWeights>;

struct ExpertStoreStats {
  uint64_t hits = 0;                // requested experts already in memory (or being prefetched)
  uint64_t misses = 0;              // requested experts that had to be read
  uint64_t bytes_read = 0;          // demand + prefetch
  uint64_t prefetch_reads = 0;
  uint64_t prefetch_used = 0;       // prefetched experts later requested
  uint64_t prefetch_bytes = 0;
  uint64_t prefetch_cancelled = 0;  // guesses their layer did not choose, dropped before they were read
  uint64_t repeat_reads_in_pass = 0;  // an expert read twice in one pass (must stay 0)
  // The union: bytes of every distinct (layer, expert) requested so far, each record counted once
  // (what reading each routed expert once would cost; the receipt's prefill ratio).
  uint64_t union_bytes = 0;
  uint64_t cached_bytes = 0;        // now
  uint64_t peak_cached_bytes = 0;   // peak of all expert memory
  double wait_seconds = 0;          // time acquire() and acquire_next() waited for reads
};

class ExpertStore {
 public:
  // Takes budget_bytes / slot bytes slots from `backend` (the slot pool, allocated once); throws
  // when the budget cannot hold the largest expert. `index` names shards in error messages.
  ExpertStore(Backend& backend, const WeightIndex& index, const ExpertTable& experts, ExpertReader& reader,
              uint64_t budget_bytes);
  static constexpr uint64_t kStagingSlots = 32;  // device pools: two K3 layers' worth of reads
  ~ExpertStore();  // waits for reads in flight

  void begin_pass();
  // first_positions[i]: the first (absolute) position of the pass that chose experts[i].
  void request(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> first_positions = {});
  void prefetch(int64_t layer, std::span<const int32_t> experts, uint64_t byte_cap);
  ExpertHandle acquire(int64_t layer, int64_t expert);
  // Waits until one of `pending` (ascending) is in memory and pins it: its index in `pending`
  // (the first one in memory) and its handle. Throws when that one's read failed. Without
  // `wait`, returns {pending.size(), nullptr} at once when none is in memory.
  std::pair<size_t, ExpertHandle> acquire_next(int64_t layer, std::span<const int32_t> pending, bool wait = true);
  void demote(int64_t layer, std::span<const int32_t> experts);
  // The positions >= `position` of the last pass were rejected: experts no earlier position of that
  // pass chose go to the cold end.
  void demote_from(int64_t position);

  ExpertStoreStats stats() const;
  // What the current (or last) pass requested since begin_pass: (layer << 32 | expert) in
  // request order (a pair requested again within the pass, rarely, appears twice), their records'
  // bytes, and how many had to be read.
  struct PassRequests {
    std::vector<uint64_t> pairs;
    uint64_t bytes = 0, missed = 0;
  };
  PassRequests pass_requests() const;
  uint64_t budget_bytes() const { return budget_; }
  // The pool's buffer: an expert's weights lie at ExpertWeights::offset in it.
  Buffer& pool_buffer() const { return pool_->buffer(); }
  int64_t slot_count() const { return static_cast<int64_t>(pool_->count()); }
  // Host memory of the staging slots (0 where reads land in the pool).
  uint64_t staging_bytes() const { return staging_ ? staging_->count() * staging_->slot_bytes() : 0; }
  // Memory every routed expert would take at once (a budget beyond it is never used).
  uint64_t total_expert_bytes() const { return total_; }
  // Requests per (layer, expert) so far: [layer][expert] (empty rows for dense layers).
  std::vector<std::vector<uint64_t>> usage() const;
  const ExpertReader& reader() const { return reader_; }

 private:
  using Key = uint64_t;  // layer << 32 | expert
  enum class State { Queued, Reading, Ready, Failed };
  struct Entry {
    CacheMeta meta;            // layer, expert and what the policy knows
    State state = State::Queued;
    std::shared_ptr<ExpertWeights> weights;  // allocated once the read is issued
    std::exception_ptr error;
    int pins = 0;
    bool wanted = false;       // requested by the current pass, not yet acquired
    bool prefetched = false;   // read by prefetch, not yet requested
    bool prefetch_read = false;  // its read (started by prefetch) counts in prefetch_in_flight_
    std::shared_ptr<std::atomic<bool>> cancel;  // a prefetch read's: set when its layer chose otherwise
    uint64_t read_pass = ~uint64_t{0};
  };

  static Key key(int64_t layer, int64_t expert) { return static_cast<uint64_t>(layer) << 32 | static_cast<uint64_t>(expert); }
  // Frees unpinned, unwanted memory until `bytes` more fit, victims in the policy's order. Only
  // entries that come back later than `limit` (cycle distance; CachePolicy::next_use) may go.
  // Returns false when it cannot.
  bool make_room(uint64_t bytes, uint64_t limit);
  bool can_start_read() const;              // mutex held: a staging slot is free (or none is needed)
  Landing landing(const ExpertWeights& w, uint64_t bytes) const;  // where w's record lands (its slot, or its staging slot)
  void start_read(Entry& e, bool urgent);   // mutex held; room already made
  // The read of a record into w (mutex not needed), and its completion on the I/O thread.
  void issue(Key k, const std::shared_ptr<ExpertWeights>& w, bool urgent, std::shared_ptr<const std::atomic<bool>> cancel);
  void read_done(Key k, const std::shared_ptr<ExpertWeights>& w, std::exception_ptr error);
  void issue_queued();                      // mutex held: start queued requests in order while room allows
  void evict(Key k);
  std::exception_ptr check_finite(Key k, const ExpertWeights& w) const;
  void unpin(Key k);

  Backend& backend_;
  const WeightIndex& index_;
  const ExpertTable& experts_;
  ExpertReader& reader_;
  uint64_t budget_;
  uint64_t total_ = 0;  // every expert in a slot at once
  std::unique_ptr<SlotPool> pool_;
  std::unique_ptr<SlotPool> staging_;  // device pools only
  int64_t layers_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;   // a read completed or a pin was released
  std::unordered_map<Key, Entry> entries_;
  std::vector<Key> queued_;           // requested, waiting for room, in request order
  std::unordered_map<Key, int64_t> first_position_;  // this pass: first position that chose each expert
  std::vector<std::vector<uint64_t>> usage_;
  uint64_t used_bytes_ = 0;           // buffers of Reading and Ready entries
  uint64_t prefetch_in_flight_ = 0;
  int reads_in_flight_ = 0;
  CachePolicy policy_;
  uint64_t pass_ = 0;
  PassRequests pass_requests_;        // this pass's
  ExpertStoreStats stats_;
};

}  // namespace deltafin
