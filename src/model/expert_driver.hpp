// The routed-experts op, driven once for every backend: the protocol of acquire / batch / pin /
// fence / capacity around the backend's three stateless expert ops (backend.hpp).
//   run_experts: expert_slots for the union, drive_experts, then expert_combine (each row's
//     outputs summed in ascending expert order), so the result depends neither on the order the
//     experts ran in nor on who ran them.
//   drive_experts: takes experts from an ExpertSource as their reads land (the first resident
//     one of those left; while a batch is open, any more that are resident at once, up to the
//     backend's expert_batch()), runs each batch with expert_ffn and hands its pins to the
//     backend with the fence after it. At most capacity() - 1 pins are held when the next expert
//     is acquired (the oldest fences are waited for), so the source always has a slot to read into.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"

namespace deltafin {

// Where a pass's experts come from (the expert store, a test's table).
class ExpertSource {
 public:
  struct Resident {
    std::array<Weight, 3> proj;       // gate [width, in], up [width, in], down [in, width]
    std::shared_ptr<const void> pin;  // keeps the weights in place while it lives
  };
  virtual ~ExpertSource() = default;
  // Blocks until `expert` is resident; throws when its read failed.
  virtual Resident acquire(int32_t expert) = 0;
  // The first of `pending` (experts not yet acquired, ascending) that is resident: its index in
  // `pending`, the expert in `out`; with `wait` it blocks until one is, without it returns
  // pending.size() when none is. Throws when that one's read failed. The default takes them in
  // ascending order (blocking).
  virtual size_t acquire_next(std::span<const int32_t> pending, Resident& out, bool wait) {
    (void)wait;
    out = acquire(pending.front());
    return 0;
  }
  // How many experts can be resident at once.
  virtual int64_t capacity() const = 0;
};

// The buffers of one expert op over n rows: x [n, in]; expert_slots' lists [count, n] and
// counts [count, 1] for the union; hidden [n k, width] and y [n k, in] by slot.
struct ExpertWork {
  Tensor x, ids, lists, counts, hidden, y;  // ids [n, k]: the routing the lists came from
  int64_t width = 0;
  GatedActivation act;
};

// y's slots of every expert of `experts` (ascending): the union (lists row i is experts[i]), or
// part of it with `rows[i]` the lists row of experts[i].
void drive_experts(Backend& backend, ExpertSource& source, std::span<const int32_t> experts, const ExpertWork& work,
                   std::span<const int64_t> rows = {});

// out [n, in] = per row, the sum in ascending expert order of weight * down(act(gate x, up x))
// over the row's experts (ids, weights [n, k] as route() writes them); `experts` the union of
// ids, ascending; width the experts' inner size. Temporaries come from `scratch`.
void run_experts(Backend& backend, Scratch& scratch, ExpertSource& source, const Tensor& x, const Tensor& ids,
                 const Tensor& weights, std::span<const int32_t> experts, int64_t width, const GatedActivation& act,
                 const Tensor& out);

// The tensors of an expert op for `experts` (ascending and distinct, else one line naming `what`):
// the union uploaded, expert_slots run, hidden and y taken from `scratch`.
ExpertWork prepare_experts(Backend& backend, Scratch& scratch, const Tensor& x, const Tensor& ids,
                           std::span<const int32_t> experts, int64_t width, const GatedActivation& act);

}  // namespace deltafin
