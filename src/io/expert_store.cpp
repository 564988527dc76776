// ExpertStore: byte-budgeted expert memory over asynchronous record reads (see expert_store.hpp).
#include "io/expert_store.hpp"

#include <chrono>
#include <cstring>

#include "util/error.hpp"
#include "util/human_bytes.hpp"
#include "weights/finite_check.hpp"

namespace deltafin {

ExpertStore::ExpertStore(Backend& backend, const WeightIndex& index, const ExpertTable& experts, ExpertReader& reader,
                         uint64_t budget_bytes)
    : backend_(backend), index_(index), experts_(experts), reader_(reader), budget_(budget_bytes), layers_(experts.layers()),
      policy_(experts.layers(), experts.experts()) {
  uint64_t largest = 0, records = 0;
  usage_.resize(layers_);
  for (int64_t layer = 0; layer < layers_; ++layer) {
    if (!experts.has(layer)) continue;
    usage_[layer].assign(experts.experts(), 0);
    for (int64_t e = 0; e < experts.experts(); ++e) {
      largest = std::max(largest, reader.buffer_bytes(layer, e));
      ++records;
    }
  }
  if (budget_ < largest)
    fail("--cache-gb {:g} cannot hold one expert ({}); all expert memory lives in this budget, so it must be at "
         "least --cache-gb {:.9g}", budget_ / 1e9, human_bytes(largest), largest / 1e9);
  const uint64_t slot = round_up(std::max<uint64_t>(largest, 1), AlignedBuffer::kAlignment);
  total_ = records * slot;
  // As many slots as the budget holds, at most one per expert.
  const uint64_t count = std::max<uint64_t>(1, std::min(budget_ / slot, records));
  try {
    pool_ = std::make_unique<SlotPool>(backend.allocate_slots(slot * count), slot, count);
  } catch (const std::bad_alloc&) {
    fail("out of memory allocating the expert slot pool ({} slots of {}); try a smaller --cache-gb", count, human_bytes(slot));
  }
  if (needs_staging(pool_->buffer())) {
    const uint64_t staging = std::min(count, kStagingSlots);
    try {
      staging_ = std::make_unique<SlotPool>(backend.allocate_host(slot * staging), slot, staging);
    } catch (const std::bad_alloc&) {
      fail("out of host memory allocating the expert staging slots ({} slots of {})", staging, human_bytes(slot));
    }
  }
}

ExpertStore::~ExpertStore() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return reads_in_flight_ == 0; });
}

void ExpertStore::evict(Key k) {
  auto it = entries_.find(k);
  used_bytes_ -= it->second.weights->resident_bytes;
  pool_->give(it->second.weights->slot);
  entries_.erase(it);
}

bool ExpertStore::make_room(uint64_t bytes, uint64_t limit) {
  while (used_bytes_ + bytes > budget_) {
    const auto victim = policy_.victim(entries_, [&](const Entry& e) {
      return e.state == State::Ready && e.pins == 0 && !e.wanted && policy_.next_use(e.meta) > limit;
    });
    if (victim == entries_.end()) return false;
    evict(victim->first);
  }
  return true;
}

Landing ExpertStore::landing(const ExpertWeights& w, uint64_t bytes) const {
  return Landing(pool_->buffer(), w.offset, bytes, staging_ ? &staging_->buffer() : nullptr,
                 staging_ ? staging_->offset(w.staging) : 0);
}

bool ExpertStore::can_start_read() const { return !staging_ || staging_->available(); }

void ExpertStore::start_read(Entry& e, bool urgent) {
  const uint64_t bytes = reader_.buffer_bytes(e.meta.layer, e.meta.expert);
  auto w = std::make_shared<ExpertWeights>();
  w->slot = pool_->take();
  if (w->slot < 0 || bytes > pool_->slot_bytes()) fail("expert {}/{}: no free slot in the pool (budget accounting)", e.meta.layer, e.meta.expert);
  w->offset = pool_->offset(w->slot);
  if (staging_) w->staging = staging_->take();
  w->record = landing(*w, bytes).host();
  w->bytes = reader_.layout(e.meta.layer, e.meta.expert).payload;
  w->resident_bytes = pool_->slot_bytes();
  w->proj = record_views(experts_.at(e.meta.layer, e.meta.expert), reader_.layout(e.meta.layer, e.meta.expert), w->record);
  e.weights = w;
  e.state = State::Reading;
  used_bytes_ += w->resident_bytes;
  stats_.peak_cached_bytes = std::max(stats_.peak_cached_bytes, used_bytes_);
  stats_.bytes_read += w->bytes;
  if (e.read_pass == pass_) ++stats_.repeat_reads_in_pass;
  e.read_pass = pass_;
  ++reads_in_flight_;
  if (!urgent) e.cancel = std::make_shared<std::atomic<bool>>(false);
  issue(key(e.meta.layer, e.meta.expert), w, urgent, e.cancel);
}

void ExpertStore::issue(Key k, const std::shared_ptr<ExpertWeights>& w, bool urgent,
                        std::shared_ptr<const std::atomic<bool>> cancel) {
  const int64_t layer = static_cast<int64_t>(k >> 32), expert = static_cast<int64_t>(k & 0xFFFFFFFF);
  reader_.read(layer, expert, const_cast<std::byte*>(w->record), urgent,
               [this, k, w](std::exception_ptr error) { read_done(k, w, error); }, std::move(cancel));
}

void ExpertStore::read_done(Key k, const std::shared_ptr<ExpertWeights>& w, std::exception_ptr error) {
  const bool cancelled = is_cancelled(error);
  if (!error && !reader_.placed()) error = check_finite(k, *w);  // placed records: the reader checked them
  if (!error) {
    try {
      landing(*w, reader_.buffer_bytes(static_cast<int64_t>(k >> 32), static_cast<int64_t>(k & 0xFFFFFFFF))).finish(backend_);
    } catch (...) {
      error = std::current_exception();
    }
  }
  std::unique_lock lock(mutex_);
  Entry& done = entries_.at(k);
  if (cancelled && done.wanted) {  // requested after its guess was cancelled: read it after all, now on demand
    done.cancel.reset();
    lock.unlock();
    return issue(k, w, true, nullptr);
  }
  if (staging_) staging_->give(w->staging), w->staging = -1;
  --reads_in_flight_;
  if (done.prefetch_read) prefetch_in_flight_ -= w->resident_bytes, done.prefetch_read = false;
  if (cancelled) {
    ++stats_.prefetch_cancelled;
    stats_.bytes_read -= w->bytes, stats_.prefetch_bytes -= w->bytes;
  }
  if (error) {
    used_bytes_ -= w->resident_bytes;
    pool_->give(w->slot);
    done.weights.reset();
    if (done.prefetched && !done.wanted) entries_.erase(k);  // a failed or cancelled guess: a demand read retries
    else done.state = State::Failed, done.error = error;
  } else {
    done.state = State::Ready;
    done.cancel.reset();
  }
  if (staging_) issue_queued();  // a staging slot is free again
  changed_.notify_all();
}

std::exception_ptr ExpertStore::check_finite(Key k, const ExpertWeights& w) const {
  // A NaN or Inf weight or scale read from the shards (E8M0 0xFF, an fp8 NaN code, a bf16 exponent
  // of all ones): refuse the expert rather than compute garbage, naming the shard. Runs as each
  // record arrives, far above drive speed. (A placed record's values are the reader's to check: a
  // bad one is a bad copy on its drive, read again from another holder.)
  const ExpertRef& ref = experts_.at(static_cast<int64_t>(k >> 32), static_cast<int64_t>(k & 0xFFFFFFFF));
  for (int p = 0; p < 3; ++p) {
    const MatrixRef& m = ref.proj[p];
    const auto bad = find_non_finite(w.proj[p]);
    if (!bad) continue;
    const TensorRef& t = bad->in_scales ? m.scale : m.weight;
    return std::make_exception_ptr(Error(fmt::format("{}: tensor '{}' holds NaN or Inf at element {} (corrupt checkpoint?)",
                                                     index_.shard_path(t.shard), t.info->name, bad->index)));
  }
  return nullptr;
}

void ExpertStore::issue_queued() {
  size_t started = 0;
  while (started < queued_.size()) {
    Entry& e = entries_.at(queued_[started]);
    if (!can_start_read() || !make_room(pool_->slot_bytes(), 0)) break;
    start_read(e, true);
    ++started;
  }
  queued_.erase(queued_.begin(), queued_.begin() + static_cast<std::ptrdiff_t>(started));
}

void ExpertStore::begin_pass() {
  std::lock_guard lock(mutex_);
  ++pass_;
  first_position_.clear();
  pass_requests_ = {};
  policy_.begin_pass();
}

void ExpertStore::request(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> first_positions) {
  std::lock_guard lock(mutex_);
  policy_.at_layer(layer);
  for (size_t i = 0; i < experts.size(); ++i) {
    const int32_t expert = experts[i];
    const uint64_t payload = reader_.layout(layer, expert).payload;
    if (usage_[layer][expert]++ == 0) stats_.union_bytes += payload;
    const Key k = key(layer, expert);
    pass_requests_.pairs.push_back(k);
    pass_requests_.bytes += payload;
    if (i < first_positions.size()) first_position_[k] = first_positions[i];
    auto it = entries_.find(k);
    if (it != entries_.end() && it->second.state == State::Failed) {
      entries_.erase(it);
      it = entries_.end();
    }
    if (it != entries_.end()) {
      Entry& e = it->second;
      if (e.state != State::Queued) ++stats_.hits;
      if (e.prefetched) ++stats_.prefetch_used, e.prefetched = false;
      if (e.cancel) e.cancel->store(false);
      e.wanted = true;
      policy_.requested(e.meta);
      continue;
    }
    ++stats_.misses;
    ++pass_requests_.missed;
    Entry& e = entries_[k];
    e.meta.layer = layer;
    e.meta.expert = expert;
    e.wanted = true;
    policy_.requested(e.meta);
    queued_.push_back(k);
  }
  // This layer's guesses that it did not choose: reads not yet started are dropped, so that the
  // drives go on to what is needed.
  for (auto& [k, e] : entries_)
    if (e.meta.layer == layer && e.prefetched && !e.wanted && e.state == State::Reading && e.cancel) e.cancel->store(true);
  issue_queued();
}

ExpertStore::PassRequests ExpertStore::pass_requests() const {
  std::lock_guard lock(mutex_);
  return pass_requests_;
}

void ExpertStore::prefetch(int64_t layer, std::span<const int32_t> experts, uint64_t byte_cap) {
  std::lock_guard lock(mutex_);
  for (int32_t expert : experts) {
    const Key k = key(layer, expert);
    if (entries_.count(k)) continue;
    const uint64_t bytes = pool_->slot_bytes();
    if (prefetch_in_flight_ + bytes > byte_cap || !can_start_read()) break;
    CacheMeta probe;
    probe.layer = layer;
    if (!make_room(bytes, policy_.next_use(probe))) break;  // only room taken from experts needed later
    Entry& e = entries_[k];
    e.meta.layer = layer;
    e.meta.expert = expert;
    e.prefetched = true;
    e.prefetch_read = true;
    prefetch_in_flight_ += bytes;
    ++stats_.prefetch_reads;
    stats_.prefetch_bytes += reader_.layout(layer, expert).payload;
    start_read(e, false);
  }
}

ExpertHandle ExpertStore::acquire(int64_t layer, int64_t expert) {
  const int32_t one = static_cast<int32_t>(expert);
  return acquire_next(layer, std::span(&one, 1)).second;
}

std::pair<size_t, ExpertHandle> ExpertStore::acquire_next(int64_t layer, std::span<const int32_t> pending, bool wait) {
  std::unique_lock lock(mutex_);
  std::vector<int32_t> unrequested;  // never requested, or a failed guess nobody asked for
  for (int32_t expert : pending) {
    auto it = entries_.find(key(layer, expert));
    if (it == entries_.end() || (!it->second.wanted && it->second.state == State::Failed)) unrequested.push_back(expert);
  }
  if (!unrequested.empty()) {
    lock.unlock();
    request(layer, unrequested);
    lock.lock();
  }
  const auto start = std::chrono::steady_clock::now();
  size_t found = pending.size();
  for (;;) {
    for (size_t i = 0; i < pending.size() && found == pending.size(); ++i) {
      const State state = entries_.at(key(layer, pending[i])).state;
      if (state == State::Ready || state == State::Failed) found = i;
    }
    if (found < pending.size()) break;
    issue_queued();
    if (!wait) return {pending.size(), nullptr};
    if (reads_in_flight_ == 0)  // every one still queued and nothing will free room: never hang
      fail("the expert budget ({}) is held by experts in use; raise --cache-gb", human_bytes(budget_));
    changed_.wait(lock);
  }
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Key k = key(layer, pending[found]);
  Entry& e = entries_.at(k);
  if (e.state == State::Failed) {
    const std::exception_ptr error = e.error;
    entries_.erase(k);
    std::erase(queued_, k);
    std::rethrow_exception(error);
  }
  e.wanted = false;
  ++e.pins;
  std::shared_ptr<ExpertWeights> keep = e.weights;
  return {found, ExpertHandle(keep.get(), [this, k, keep](const ExpertWeights*) { unpin(k); })};
}

void ExpertStore::unpin(Key k) {
  std::lock_guard lock(mutex_);
  --entries_.at(k).pins;
  issue_queued();
  changed_.notify_all();
}

void ExpertStore::demote(int64_t layer, std::span<const int32_t> experts) {
  std::lock_guard lock(mutex_);
  for (int32_t expert : experts) {
    auto it = entries_.find(key(layer, expert));
    if (it != entries_.end() && !it->second.wanted) it->second.meta.cold = true;
  }
}

void ExpertStore::demote_from(int64_t position) {
  std::lock_guard lock(mutex_);
  for (const auto& [k, first] : first_position_) {
    if (first < position) continue;
    auto it = entries_.find(k);
    if (it != entries_.end() && !it->second.wanted) it->second.meta.cold = true;
  }
}

ExpertStoreStats ExpertStore::stats() const {
  std::lock_guard lock(mutex_);
  ExpertStoreStats s = stats_;
  s.cached_bytes = used_bytes_;
  return s;
}

std::vector<std::vector<uint64_t>> ExpertStore::usage() const {
  std::lock_guard lock(mutex_);
  return usage_;
}

}  // namespace deltafin
