// SpineStream (see spine_stream.hpp).
#include "io/spine_stream.hpp"

#include <sys/mman.h>

#include "util/error.hpp"
#include "weights/finite_check.hpp"

namespace deltafin {
namespace {

constexpr uintptr_t kPage = 4096;

// Gives a buffer's whole pages back to the system; the next read fills them again.
void give_back(Buffer* buffer) {
  if (!buffer || !buffer->host()) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(buffer->host()) + kPage - 1) / kPage * kPage;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(buffer->host()) + buffer->bytes()) / kPage * kPage;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

SpineStream::SpineStream(Backend& backend, const WeightIndex& index, ExpertReader& reader, std::vector<bool> resident,
                         int window_units)
    : backend_(backend), index_(index), reader_(reader), resident_(std::move(resident)), window_units_(window_units),
      units_(resident_.size()) {}

void SpineStream::drain() {
  std::unique_lock lock(mutex_);
  landed_.wait(lock, [&] {
    for (const Unit& u : units_)
      if (u.pending) return false;
    return true;
  });
}

void SpineStream::add(int64_t unit, const MatrixRef& ref, Buffer* data, Buffer* scales) {
  if (!data->host() || (scales && !scales->host()))
    fail("the spine does not fit the memory budget and the {} backend cannot stream it (its buffers are not host memory); "
         "give a larger --memory-gb",
         backend_.name());
  units_[unit].matrices.push_back({ref, data, scales});
  units_[unit].bytes += ref.bytes();
  for (const TensorRef* t : {&ref.weight, &ref.scale})
    if (t->info && reader_.has_spine_record(t->info->name)) units_[unit].record_bytes += t->info->nbytes;
  streamed_bytes_ += ref.bytes();
}

int64_t SpineStream::next_streamed(int64_t after) const {
  const int64_t n = static_cast<int64_t>(units_.size());
  for (int64_t i = 1; i <= n; ++i) {
    const int64_t u = (after + i) % n;
    if (streamed(u)) return u;
  }
  return -1;
}

void SpineStream::start(int64_t unit) {
  Unit& u = units_[unit];
  {
    std::lock_guard lock(mutex_);
    if (u.started) return;
    u.started = true, u.loaded = false, u.error = nullptr;
    for (const Matrix& m : u.matrices) u.pending += m.scales ? 2 : 1;
  }
  const auto issue = [&](const TensorRef& t, Buffer* dst) {
    auto landed = [this, unit](std::exception_ptr e) {
      std::lock_guard lock(mutex_);
      Unit& v = units_[unit];
      if (e && !v.error) v.error = e;
      if (--v.pending == 0) v.loaded = true, landed_.notify_all();
    };
    if (reader_.has_spine_record(t.info->name)) reader_.read_spine_record(t.info->name, dst->host(), std::move(landed));
    else reader_.read_shard(index_.shard_file(t.shard), t.info->offset, t.info->nbytes, dst->host(), std::move(landed));
  };
  for (const Matrix& m : u.matrices) {
    issue(m.ref.weight, m.data);
    if (m.scales) issue(m.ref.scale, m.scales);
  }
  std::lock_guard lock(mutex_);
  if (u.matrices.empty()) u.loaded = true;
}

void SpineStream::wait(int64_t unit) {
  Unit& u = units_[unit];
  {
    std::unique_lock lock(mutex_);
    landed_.wait(lock, [&] { return u.loaded; });
    if (u.error) std::rethrow_exception(u.error);
    bytes_read_ += u.bytes;
    record_bytes_read_ += u.record_bytes;
  }
  if (u.checked) return;
  for (const Matrix& m : u.matrices)
    require_finite(WeightView{m.ref.format, m.data->host(), m.ref.rows, m.ref.cols, m.scales ? m.scales->host() : nullptr},
                   m.ref.weight.info->name, m.ref.scale.info ? m.ref.scale.info->name : "");
  u.checked = true;
}

void SpineStream::release(int64_t unit) {
  backend_.wait(backend_.commit());  // nothing enqueued may still read the unit
  Unit& u = units_[unit];
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
  if (window_units_ < 2) return;
  const int64_t next = next_streamed(unit);
  if (next >= 0 && next != unit) start(next);
}

uint64_t SpineStream::bytes_read() const {
  std::lock_guard lock(mutex_);
  return bytes_read_;
}

uint64_t SpineStream::record_bytes_read() const {
  std::lock_guard lock(mutex_);
  return record_bytes_read_;
}

}  // namespace deltafin
