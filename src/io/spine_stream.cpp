// SpineStream (see spine_stream.hpp).
#include "io/spine_stream.hpp"

#include <sys/mman.h>

#include "io/landing.hpp"
#include "util/error.hpp"
#include "util/human_bytes.hpp"
#include "weights/finite_check.hpp"

namespace deltafin {
namespace {

constexpr uintptr_t kPage = 4096;
constexpr uint64_t kAlign = 4096;             // a matrix's tensors in a window slot
constexpr uint64_t kSlack = 64 * kAlign;      // room for that alignment beyond the planned bytes

uint64_t align(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Gives a buffer's whole pages back to the system; the next read fills them again.
void give_back(Buffer* buffer) {
  if (!buffer || !buffer->host()) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(buffer->host()) + kPage - 1) / kPage * kPage;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(buffer->host()) + buffer->bytes()) / kPage * kPage;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

SpineStream::SpineStream(Backend& backend, const WeightIndex& index, ExpertReader& reader, StreamPlan plan)
    : backend_(backend), index_(index), reader_(reader), plan_(std::move(plan)),
      slots_(!backend.memory_pools().back().host_visible), units_(plan_.resident.size()) {
  if (!slots_) return;
  // Streamed units take the window's slots in turn; each slot holds the largest of its units.
  window_.resize(std::max(1, plan_.window_units));
  std::vector<bool> from_drives(window_.size(), false);
  int next = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!streamed(static_cast<int64_t>(u))) continue;
    Slot& s = window_[next];
    units_[u].slot = next;
    const uint64_t planned = u < plan_.unit_bytes.size() ? plan_.unit_bytes[u] : 0;
    s.bytes = std::max(s.bytes, align(planned) + kSlack);
    if (!host_held(static_cast<int64_t>(u))) from_drives[next] = true;
    next = (next + 1) % static_cast<int>(window_.size());
  }
  for (size_t i = 0; i < window_.size(); ++i) {
    if (!window_[i].bytes) continue;
    window_[i].device = backend.allocate(window_[i].bytes);
    if (from_drives[i] && needs_staging(*window_[i].device)) window_[i].staging = backend.allocate_host(window_[i].bytes);
  }
}

void SpineStream::drain() {
  std::unique_lock lock(mutex_);
  landed_.wait(lock, [&] {
    for (const Unit& u : units_)
      if (u.pending) return false;
    return true;
  });
}

StreamedMatrix SpineStream::add(int64_t unit, const MatrixRef& ref) {
  Unit& u = units_[unit];
  StreamedMatrix out;
  Matrix m{ref, nullptr, nullptr};
  if (!slots_) {
    out.data = backend_.allocate(ref.weight.info->nbytes);
    if (ref.scale.info) out.scales = backend_.allocate(ref.scale.info->nbytes);
    m.data = out.data.get(), m.scales = out.scales.get();
    out.weight = {ref.format, ref.rows, ref.cols, m.data, 0, m.scales, 0};
  } else {
    Slot& s = window_[u.slot];
    m.data_at = align(u.extent);
    u.extent = m.data_at + ref.weight.info->nbytes;
    if (ref.scale.info) m.scales_at = align(u.extent), u.extent = m.scales_at + ref.scale.info->nbytes;
    if (u.extent > s.bytes)
      fail("spine unit {}: its matrices take more than the {} its window slot holds (config.json describes less than the "
           "checkpoint holds: tensor '{}')", unit, human_bytes(s.bytes), ref.weight.info->name);
    out.weight = {ref.format, ref.rows, ref.cols, s.device.get(), m.data_at, ref.scale.info ? s.device.get() : nullptr,
                  m.scales_at};
    if (host_held(unit)) {  // read now, into host memory laid out as the slot is, and checked
      if (!u.held) {  // as large as the unit's plan allows (the slot may be larger: it takes the largest of its units)
        const bool planned = unit < static_cast<int64_t>(plan_.unit_bytes.size());
        u.held = backend_.allocate_host(planned ? std::min(s.bytes, align(plan_.unit_bytes[unit]) + kSlack) : s.bytes);
      }
      if (u.extent > u.held->bytes()) fail("spine unit {}: its matrices take more than config.json describes (tensor '{}')", unit,
                                           ref.weight.info->name);
      index_.read(ref.weight, u.held->host() + m.data_at);
      if (ref.scale.info) index_.read(ref.scale, u.held->host() + m.scales_at);
      require_finite(WeightView{ref.format, u.held->host() + m.data_at, ref.rows, ref.cols,
                                ref.scale.info ? u.held->host() + m.scales_at : nullptr},
                     ref.weight.info->name, ref.scale.info ? ref.scale.info->name : "");
      u.checked = true;
    }
  }
  u.matrices.push_back(m);
  u.bytes += ref.bytes();
  if (!host_held(unit))
    for (const TensorRef* t : {&ref.weight, &ref.scale})
      if (t->info && reader_.has_spine_record(t->info->name)) u.record_bytes += t->info->nbytes;
  streamed_bytes_ += ref.bytes();
  return out;
}

int64_t SpineStream::next_streamed(int64_t after) const {
  const int64_t n = static_cast<int64_t>(units_.size());
  for (int64_t i = 1; i <= n; ++i) {
    const int64_t u = (after + i) % n;
    if (streamed(u)) return u;
  }
  return -1;
}

void SpineStream::landed(int64_t unit, std::exception_ptr e) {
  std::unique_lock lock(mutex_);
  Unit& u = units_[unit];
  if (e && !u.error) u.error = e;
  if (u.pending > 1) {
    --u.pending;
    return;
  }
  if (slots_ && !host_held(unit) && !u.error) {  // the last read into a slot's staging: then the copy
    lock.unlock();
    slot_filled(unit);
    lock.lock();
  }
  u.pending = 0;  // only now: drain() waits for the copy too
  u.loaded = true;
  landed_.notify_all();
}

void SpineStream::slot_filled(int64_t unit) {
  Unit& u = units_[unit];
  Slot& s = window_[u.slot];
  try {
    const Landing landing(*s.device, 0, u.extent, s.staging.get());
    if (!u.checked) check(u, true, landing.host());
    landing.finish(backend_);
    std::lock_guard lock(mutex_);
    u.checked = true;
    bytes_uploaded_ += landing.staged() ? u.extent : 0;
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!u.error) u.error = std::current_exception();
  }
}

void SpineStream::check(Unit& u, bool in_slot_layout, const std::byte* base) const {
  for (const Matrix& m : u.matrices) {
    const std::byte* data = in_slot_layout ? base + m.data_at : m.data->host();
    const std::byte* scales = !m.ref.scale.info ? nullptr : in_slot_layout ? base + m.scales_at : m.scales->host();
    require_finite(WeightView{m.ref.format, data, m.ref.rows, m.ref.cols, scales}, m.ref.weight.info->name,
                   m.ref.scale.info ? m.ref.scale.info->name : "");
  }
}

void SpineStream::start_copy(int64_t unit) {
  Unit& u = units_[unit];
  u.copy = std::async(std::launch::async, [this, unit] {
    Unit& v = units_[unit];
    std::exception_ptr error;
    try {
      Landing(*window_[v.slot].device, 0, v.extent, v.held.get()).finish(backend_);
      std::lock_guard lock(mutex_);
      bytes_uploaded_ += v.extent;
    } catch (...) {
      error = std::current_exception();
    }
    landed(unit, error);
  });
}

void SpineStream::start(int64_t unit) {
  Unit& u = units_[unit];
  {
    std::lock_guard lock(mutex_);
    if (u.started) return;
    u.started = true, u.loaded = false, u.error = nullptr;
    u.pending = 0;
    if (slots_ && host_held(unit)) u.pending = 1;
    else
      for (const Matrix& m : u.matrices) u.pending += m.ref.scale.info ? 2 : 1;
    if (u.pending == 0) {
      u.loaded = true;
      return;
    }
  }
  if (slots_ && host_held(unit)) return start_copy(unit);
  Slot* slot = slots_ ? &window_[u.slot] : nullptr;
  const auto issue = [&](const TensorRef& t, Buffer* own, uint64_t at) {
    // Into the matrix's own buffer, or into the slot (through its staging where the host cannot write it).
    const Landing landing = own ? Landing(*own, 0, t.info->nbytes) : Landing(*slot->device, at, t.info->nbytes, slot->staging.get(), at);
    auto done = [this, unit](std::exception_ptr e) { landed(unit, e); };
    if (reader_.has_spine_record(t.info->name)) reader_.read_spine_record(t.info->name, landing.host(), std::move(done));
    else reader_.read_shard(index_.shard_file(t.shard), t.info->offset, t.info->nbytes, landing.host(), std::move(done));
  };
  for (const Matrix& m : u.matrices) {
    issue(m.ref.weight, m.data, m.data_at);
    if (m.ref.scale.info) issue(m.ref.scale, m.scales, m.scales_at);
  }
}

void SpineStream::wait(int64_t unit) {
  Unit& u = units_[unit];
  {
    std::unique_lock lock(mutex_);
    landed_.wait(lock, [&] { return u.loaded; });
    if (u.error) std::rethrow_exception(u.error);
    if (!(slots_ && host_held(unit))) bytes_read_ += u.bytes, record_bytes_read_ += u.record_bytes;
  }
  if (u.checked) return;
  check(u, false, nullptr);  // own buffers (a slot's units are checked before their copy)
  u.checked = true;
}

void SpineStream::release(int64_t unit) {
  backend_.wait(backend_.commit());  // nothing enqueued may still read the unit
  Unit& u = units_[unit];
  if (!slots_)
    for (const Matrix& m : u.matrices) give_back(m.data), give_back(m.scales);
  std::lock_guard lock(mutex_);
  u.started = u.loaded = false;
}

void SpineStream::enter(int64_t unit) {
  if (!streamed(unit)) return;
  if (current_ >= 0 && current_ != unit) release(current_);
  start(unit);
  wait(unit);
  current_ = unit;
  if (plan_.window_units < 2) return;
  const int64_t next = next_streamed(unit);
  // Read ahead, but never into the slot the running unit is in.
  if (next >= 0 && next != unit && (!slots_ || units_[next].slot != units_[unit].slot)) start(next);
}

uint64_t SpineStream::bytes_read() const {
  std::lock_guard lock(mutex_);
  return bytes_read_;
}

uint64_t SpineStream::record_bytes_read() const {
  std::lock_guard lock(mutex_);
  return record_bytes_read_;
}

uint64_t SpineStream::bytes_uploaded() const {
  std::lock_guard lock(mutex_);
  return bytes_uploaded_;
}

uint64_t SpineStream::window_bytes() const {
  uint64_t bytes = 0;
  for (const Slot& s : window_) bytes += s.device ? s.bytes : 0;
  return bytes;
}

uint64_t SpineStream::host_bytes() const {
  uint64_t bytes = 0;
  for (const Slot& s : window_) bytes += s.staging ? s.bytes : 0;
  for (const Unit& u : units_) bytes += u.held ? u.held->bytes() : 0;
  return bytes;
}

}  // namespace deltafin
