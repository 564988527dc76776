// ExpertStore: a byte-budgeted LRU cache over synchronous reads of expert tensors.
#include "io/expert_store.hpp"

#include <cstring>

#include "util/error.hpp"

namespace deltafin {
namespace {

constexpr uint64_t align64(uint64_t n) { return (n + 63) / 64 * 64; }

}  // namespace

ExpertStore::ExpertStore(const WeightIndex& index, const ExpertTable& experts, uint64_t budget_bytes, bool bypass)
    : index_(index), experts_(experts), budget_(budget_bytes), bypass_(bypass) {}

ExpertHandle ExpertStore::read(int64_t layer, int64_t expert) const {
  const ExpertRef& ref = experts_.at(layer, expert);
  uint64_t total = 0;
  for (const MatrixRef& m : ref.proj) total += align64(m.weight.info->nbytes) + (m.scale.info ? align64(m.scale.info->nbytes) : 0);
  auto out = std::make_shared<ExpertWeights>();
  out->storage = AlignedBuffer(total);
  out->bytes = ref.bytes();
  out->resident_bytes = (total + AlignedBuffer::kAlignment - 1) / AlignedBuffer::kAlignment * AlignedBuffer::kAlignment;
  std::byte* cursor = out->storage.data();
  for (int p = 0; p < 3; ++p) {
    const MatrixRef& m = ref.proj[p];
    WeightView& view = out->proj[p];
    view.format = m.format;
    view.rows = m.rows;
    view.cols = m.cols;
    auto read = [&](const TensorRef& t, std::byte* dst) { bypass_ ? index_.read_uncached(t, dst) : index_.read(t, dst); };
    read(m.weight, cursor);
    view.data = cursor;
    cursor += align64(m.weight.info->nbytes);
    if (m.scale.info) {
      read(m.scale, cursor);
      if (m.format == WeightFormat::MXFP4 && std::memchr(cursor, 0xFF, m.scale.info->nbytes))
        fail("{}: tensor '{}.weight_scale' holds the E8M0 NaN byte 0xFF (corrupt checkpoint?)",
             index_.shard_path(m.scale.shard), m.name);
      view.scales = cursor;
      cursor += align64(m.scale.info->nbytes);
    }
  }
  return out;
}

void ExpertStore::make_room(uint64_t bytes) {
  // Evict least recently used experts that nobody holds until `bytes` more fit.
  for (auto it = lru_.end(); it != lru_.begin() && stats_.cached_bytes + bytes > budget_;) {
    --it;
    auto entry = cache_.find(*it);
    if (entry->second.weights.use_count() > 1) continue;  // pinned by a caller
    stats_.cached_bytes -= entry->second.weights->resident_bytes;
    cache_.erase(entry);
    it = lru_.erase(it);
  }
}

ExpertHandle ExpertStore::acquire(int64_t layer, int64_t expert) {
  const Key key = (static_cast<uint64_t>(layer) << 32) | static_cast<uint64_t>(expert);
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
      return it->second.weights;
    }
  }
  ExpertHandle weights = read(layer, expert);
  std::lock_guard lock(mutex_);
  ++stats_.misses;
  stats_.bytes_read += weights->bytes;
  if (cache_.count(key)) return cache_[key].weights;  // another thread read it meanwhile
  make_room(weights->resident_bytes);
  if (stats_.cached_bytes + weights->resident_bytes <= budget_) {
    lru_.push_front(key);
    cache_[key] = Entry{weights, lru_.begin()};
    stats_.cached_bytes += weights->resident_bytes;
    stats_.peak_cached_bytes = std::max(stats_.peak_cached_bytes, stats_.cached_bytes);
  }
  return weights;
}

ExpertStoreStats ExpertStore::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace deltafin
