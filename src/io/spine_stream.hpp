// The streamed part of the spine (decode/memory_plan.hpp chose it): units (the embedding, one
// layer, the head) whose matrices are not kept in the device's memory but pass through it every
// pass, ahead of the unit, and are given back once the pass has moved past it. At most two
// streamed units hold memory at once: the one running and the next one being read (one with a
// one-unit window: read when its turn comes). Small fp32 vectors (norms, biases, gates) stay
// resident. Where the bytes come from:
//   the drives  each pass, at low priority through the expert reader's drive queue with the page
//               cache bypassed: each tensor (a matrix's weights, its scales) from its own record
//               when the placement has one (`deltafin place`, manifest version 3: spread and
//               replicated over the drives, each piece from the holder expected to finish first),
//               else from the checkpoint's shard;
//   host memory (a device the host cannot write, StreamPlan::host_held) read once at load into
//               pinned host memory, copied to the device each pass.
// Where they go (the device's pool, Backend::memory_pools().back()):
//   host-visible (CPU, Metal)  each matrix has buffers of its own, whose pages are given back
//               (madvise) after the unit ran: the reads land in them directly;
//   device memory (CUDA)       a window of StreamPlan::window_units slots of device memory, each
//               streamed unit in a fixed one (in turn), its matrices 4 KiB-aligned in it; drive
//               reads land in a pinned staging copy of the slot, which one copy moves into the
//               slot once the unit's reads are in (io/landing.hpp). A unit is read ahead only
//               into a slot other than the running unit's.
//
// The bytes are the checkpoint's (a record holds them unchanged), read into the same stored
// format a resident matrix has, and the ops run in the same order, so a pass computes bit for bit
// what a resident spine gives. Each streamed matrix is checked for NaN and Inf on its first read
// in the process (a host-held one as it loads).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "io/expert_reader.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// The memory plan's part the stream follows, per unit (embedding, layers..., head).
struct StreamPlan {
  std::vector<bool> resident;        // kept in the device's memory (not streamed)
  std::vector<bool> host_held;       // streamed from host memory (empty: every streamed unit from the drives)
  std::vector<uint64_t> unit_bytes;  // as planned: a device window slot holds the largest of its units
  int window_units = 2;              // 2: the next unit is read while one runs; 1: read in turn
};

// Where a streamed matrix lies: buffers of its own (data, scales) or a window slot (weight only).
struct StreamedMatrix {
  std::unique_ptr<Buffer> data, scales;
  Weight weight;
};

class SpineStream {
 public:
  SpineStream(Backend& backend, const WeightIndex& index, ExpertReader& reader, StreamPlan plan);
  ~SpineStream() { drain(); }
  SpineStream(const SpineStream&) = delete;
  SpineStream& operator=(const SpineStream&) = delete;

  bool streamed(int64_t unit) const {
    return unit >= 0 && unit < static_cast<int64_t>(plan_.resident.size()) && !plan_.resident[unit];
  }
  // Loading: a streamed unit's matrix joins the unit; its memory holds nothing until the unit is
  // read (a host-held unit's bytes are read into host memory now).
  StreamedMatrix add(int64_t unit, const MatrixRef& ref);
  // Passes: unit `unit` is about to run. Waits for its read (starting it when nothing has yet),
  // gives back the streamed unit that ran before it, and starts reading the next streamed unit.
  void enter(int64_t unit);

  // Waits for every read and copy in flight (before the buffers they fill go away).
  void drain();

  uint64_t bytes_read() const;         // from the drives
  uint64_t record_bytes_read() const;  // the part of bytes_read() read from placed spine records
  uint64_t bytes_uploaded() const;     // copied from host memory into device memory
  uint64_t streamed_bytes() const { return streamed_bytes_; }  // of every streamed unit, once
  // Device memory: the window slots; host memory: the host-held units and the slots' staging.
  uint64_t window_bytes() const;
  uint64_t host_bytes() const;

 private:
  struct Matrix {
    MatrixRef ref;
    Buffer* data;            // own buffers (host-visible pool)
    Buffer* scales;
    uint64_t data_at = 0, scales_at = 0;  // offsets in the unit's slot (device pool)
  };
  struct Unit {
    std::vector<Matrix> matrices;
    uint64_t bytes = 0;        // of its matrices, read each turn
    uint64_t record_bytes = 0; // of those, in placed spine records
    uint64_t extent = 0;       // device pool: bytes of its slot it lays out
    int slot = -1;             // device pool: its window slot
    std::unique_ptr<Buffer> held;  // host-held: its bytes, laid out as in the slot (pinned)
    bool checked = false;      // NaN/Inf checked after its first read
    int pending = 0;           // reads and copies in flight
    bool loaded = false;       // every read landed
    bool started = false;      // reads issued for this turn
    std::exception_ptr error;
    std::future<void> copy;    // host-held: this turn's copy to the device
  };
  struct Slot {
    std::unique_ptr<Buffer> device;   // the window slot
    std::unique_ptr<Buffer> staging;  // pinned host memory drive reads land in (when any unit of it reads the drives)
    uint64_t bytes = 0;
  };
  bool host_held(int64_t unit) const { return unit < static_cast<int64_t>(plan_.host_held.size()) && plan_.host_held[unit]; }
  void start(int64_t unit);
  void start_copy(int64_t unit);   // device pool, host-held
  void landed(int64_t unit, std::exception_ptr e);
  void slot_filled(int64_t unit);  // device pool, from the drives: check, then copy the staging into the slot
  void check(Unit& u, bool in_slot_layout, const std::byte* base) const;
  void wait(int64_t unit);
  void release(int64_t unit);
  int64_t next_streamed(int64_t after) const;

  Backend& backend_;
  const WeightIndex& index_;
  ExpertReader& reader_;
  StreamPlan plan_;
  bool slots_;  // the device's pool is not host-visible: stream through window slots
  std::vector<Unit> units_;
  std::vector<Slot> window_;
  int64_t current_ = -1;  // the streamed unit that ran last
  uint64_t streamed_bytes_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable landed_;
  uint64_t bytes_read_ = 0;
  uint64_t record_bytes_read_ = 0;
  uint64_t bytes_uploaded_ = 0;
};

}  // namespace deltafin
