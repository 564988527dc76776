// The expert store: every routed-expert byte reaches the model through here.
// acquire(layer, expert) returns the expert's three projections in memory, from the cache or
// read synchronously from the checkpoint shards. The cache holds at most `budget_bytes` of
// experts (LRU); experts in use are pinned by their handles and never evicted. When the budget
// cannot hold an expert, it is read into a transient buffer that lives only while in use.
// (Stage 5 replaces the reader with per-drive queues, page-cache bypass and prefetch.)
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cpu/weight_view.hpp"
#include "io/aligned_buffer.hpp"
#include "weights/expert_table.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

struct ExpertWeights {
  AlignedBuffer storage;                // all three projections (and their scales) back to back
  std::array<WeightView, 3> proj;       // gate [inter, hidden], up [inter, hidden], down [hidden, inter]
  uint64_t bytes = 0;                   // tensor bytes read from disk
  uint64_t resident_bytes = 0;          // memory held (what the budget counts)
};

using ExpertHandle = std::shared_ptr<const ExpertWeights>;

struct ExpertStoreStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_read = 0;
  uint64_t cached_bytes = 0;       // now
  uint64_t peak_cached_bytes = 0;
};

class ExpertStore {
 public:
  // bypass: read experts around the page cache (the default for streaming; see ReadOnlyFile).
  ExpertStore(const WeightIndex& index, const ExpertTable& experts, uint64_t budget_bytes, bool bypass = true);

  ExpertHandle acquire(int64_t layer, int64_t expert);
  ExpertStoreStats stats() const;
  uint64_t budget_bytes() const { return budget_; }

 private:
  using Key = uint64_t;  // layer << 32 | expert
  struct Entry {
    ExpertHandle weights;
    std::list<Key>::iterator lru_pos;
  };

  ExpertHandle read(int64_t layer, int64_t expert) const;
  void make_room(uint64_t bytes);

  const WeightIndex& index_;
  const ExpertTable& experts_;
  uint64_t budget_;
  bool bypass_;
  mutable std::mutex mutex_;
  std::unordered_map<Key, Entry> cache_;
  std::list<Key> lru_;  // front = most recently used
  ExpertStoreStats stats_;
};

}  // namespace deltafin
