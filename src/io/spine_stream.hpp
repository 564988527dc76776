// The streamed part of the spine (decode/memory_plan.hpp chose it): units (the embedding, one
// layer, the head) whose matrices are not kept in memory but read every pass, each into its own
// buffers, ahead of the unit at low priority through the expert reader's drive queue with the page
// cache bypassed, and given back (madvise) once the pass has moved past it. At most two streamed
// units hold memory at once: the one running and the next one being read (one with a one-unit
// window: read when its turn comes). Small fp32 vectors (norms, biases, gates) stay resident.
// Each tensor (a matrix's weights, its scales) is read from its own record on the drives when the
// placement has one (`deltafin place`, manifest version 3: spread and replicated over the drives,
// each piece from the holder expected to finish first), else from the checkpoint's shard.
//
// The bytes are the checkpoint's (a record holds them unchanged), read into the same kind of buffer a resident matrix has, and
// the ops run in the same order, so a pass computes bit for bit what a resident spine gives.
// Each streamed matrix is checked for NaN and Inf on its first read in the process.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "io/expert_reader.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

class SpineStream {
 public:
  // resident: per unit (embedding, layers..., head); window_units: 2 (read ahead) or 1.
  SpineStream(Backend& backend, const WeightIndex& index, ExpertReader& reader, std::vector<bool> resident,
              int window_units);
  ~SpineStream() { drain(); }
  SpineStream(const SpineStream&) = delete;
  SpineStream& operator=(const SpineStream&) = delete;

  bool streamed(int64_t unit) const { return unit >= 0 && unit < static_cast<int64_t>(resident_.size()) && !resident_[unit]; }
  // Loading: a streamed unit's matrix (data, and scales when the format has them) joins the unit,
  // in buffers that hold nothing until the unit is read.
  void add(int64_t unit, const MatrixRef& ref, Buffer* data, Buffer* scales);
  // Passes: unit `unit` is about to run. Waits for its read (starting it when nothing has yet),
  // gives back the streamed unit that ran before it, and starts reading the next streamed unit.
  void enter(int64_t unit);

  // Waits for every read in flight (before the buffers they fill go away).
  void drain();

  uint64_t bytes_read() const;
  uint64_t record_bytes_read() const;  // the part of bytes_read() read from placed spine records
  uint64_t streamed_bytes() const { return streamed_bytes_; }  // of every streamed unit, once

 private:
  struct Matrix {
    MatrixRef ref;
    Buffer* data;
    Buffer* scales;
  };
  struct Unit {
    std::vector<Matrix> matrices;
    uint64_t bytes = 0;     // of its matrices, read each turn
    uint64_t record_bytes = 0;  // of those, in placed spine records
    bool checked = false;   // NaN/Inf checked after its first read
    int pending = 0;        // reads in flight
    bool loaded = false;    // every read landed
    bool started = false;   // reads issued for this turn
    std::exception_ptr error;
  };
  void start(int64_t unit);
  void wait(int64_t unit);
  void release(int64_t unit);
  int64_t next_streamed(int64_t after) const;

  Backend& backend_;
  const WeightIndex& index_;
  ExpertReader& reader_;
  std::vector<bool> resident_;
  int window_units_;
  std::vector<Unit> units_;
  int64_t current_ = -1;  // the streamed unit that ran last
  uint64_t streamed_bytes_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable landed_;
  uint64_t bytes_read_ = 0;
  uint64_t record_bytes_read_ = 0;
};

}  // namespace deltafin
