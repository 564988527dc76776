// drive_experts / run_experts (see expert_driver.hpp).
#include "model/expert_driver.hpp"

#include <algorithm>
#include <deque>
#include <exception>
#include <numeric>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace deltafin {
namespace {

// One line when an expert's projections do not have the op's shapes.
void check_shapes(const ExpertSource::Resident& r, int32_t expert, int64_t width, int64_t in) {
  const Weight &gate = r.proj[0], &up = r.proj[1], &down = r.proj[2];
  if (gate.rows != width || gate.cols != in || up.rows != width || up.cols != in || down.rows != in ||
      down.cols != width || gate.format != up.format)
    fail("expert {}: projections [{}, {}], [{}, {}], [{}, {}] do not match width {} and input {}", expert, gate.rows,
         gate.cols, up.rows, up.cols, down.rows, down.cols, width, in);
}

}  // namespace

void drive_experts(Backend& backend, ExpertSource& source, std::span<const int32_t> experts, const ExpertWork& work,
                   std::span<const int64_t> rows) {
  const int64_t in = work.x.cols;
  const size_t keep = static_cast<size_t>(std::max<int64_t>(source.capacity() - 1, 0));
  const size_t most = static_cast<size_t>(std::max<int64_t>(backend.expert_batch(), 1));
  std::vector<int32_t> pending(experts.begin(), experts.end());  // not yet acquired, ascending
  std::vector<int64_t> list(rows.begin(), rows.end());           // pending[i] is row list[i] of the lists
  if (rows.empty()) {
    list.resize(pending.size());
    std::iota(list.begin(), list.end(), 0);
  } else if (rows.size() != experts.size()) {
    fail("expert op: {} lists rows for {} experts", rows.size(), experts.size());
  }
  std::vector<ResidentExpert> batch;
  std::vector<std::shared_ptr<const void>> pins;  // the open batch's
  std::deque<Backend::Fence> held;                // per pin handed to the backend, its fence, oldest first

  // Runs the open batch; its pins go to the backend with the fence after its commands (also when
  // expert_ffn throws: part of the batch may be enqueued already).
  const auto run_batch = [&] {
    std::exception_ptr error;
    try {
      backend.expert_ffn(batch, work.x, work.lists, work.counts, work.act, work.hidden, work.y);
    } catch (...) {
      error = std::current_exception();
    }
    const Backend::Fence fence = backend.commit();
    for (auto& pin : pins) {
      backend.hold_until(fence, std::move(pin));
      held.push_back(fence);
    }
    batch.clear();
    pins.clear();
    if (error) std::rethrow_exception(error);
  };

  while (!pending.empty()) {
    if (held.size() + pins.size() > keep) {  // room in the source for the next expert first
      if (!batch.empty()) {
        run_batch();
        continue;
      }
      const Backend::Fence oldest = held.front();
      backend.wait(oldest);
      while (!held.empty() && held.front() <= oldest) held.pop_front();
      continue;
    }
    ExpertSource::Resident r;
    const size_t i = source.acquire_next(pending, r, batch.empty());
    if (i == pending.size()) {  // none of the rest has landed: run what has
      run_batch();
      continue;
    }
    check_shapes(r, pending[i], work.width, in);
    batch.push_back({r.proj, list[i]});
    pins.push_back(std::move(r.pin));
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    if (batch.size() == most) run_batch();
  }
  if (!batch.empty()) run_batch();
}

ExpertWork prepare_experts(Backend& backend, Scratch& scratch, const Tensor& x, const Tensor& ids,
                           std::span<const int32_t> experts, int64_t width, const GatedActivation& act) {
  const int64_t n = x.rows, k = ids.cols, count = static_cast<int64_t>(experts.size());
  if (ids.rows != n) fail("expert op: ids [{}, {}] for x [{}, {}]", ids.rows, ids.cols, x.rows, x.cols);
  for (int64_t i = 1; i < count; ++i)
    if (experts[i] <= experts[i - 1]) fail("expert op: the union of experts is not ascending and distinct");
  ExpertWork w;
  w.x = x, w.ids = ids, w.width = width, w.act = act;
  const Tensor union_ids = scratch.take(count, 1, Elem::I32);
  if (count > 0) backend.upload(experts.data(), *union_ids.buffer, union_ids.offset, static_cast<uint64_t>(count) * 4);
  w.lists = scratch.take(count, n, Elem::I32);
  w.counts = scratch.take(count, 1, Elem::I32);
  w.hidden = scratch.take(n * k, width);
  w.y = scratch.take(n * k, x.cols);
  backend.expert_slots(ids, union_ids, w.lists, w.counts);
  return w;
}

void run_experts(Backend& backend, Scratch& scratch, ExpertSource& source, const Tensor& x, const Tensor& ids,
                 const Tensor& weights, std::span<const int32_t> experts, int64_t width, const GatedActivation& act,
                 const Tensor& out) {
  const Scratch::Mark frame = scratch.mark();
  const ExpertWork work = prepare_experts(backend, scratch, x, ids, experts, width, act);
  drive_experts(backend, source, experts, work);
  backend.expert_combine(ids, weights, work.y, out);
  scratch.release(frame);
}

}  // namespace deltafin
