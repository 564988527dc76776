// Device time of the CUDA backend's ops by category, measured only with DELTAFIN_DEVICE_PROFILE=1
// (Backend::times(), the receipt's "device" line): an event pair around each op on the compute
// stream (so host waits between ops are not counted), summed once the stream has passed them;
// the expert store's upload_slot copies are timed on the host around the copy and its wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"

namespace deltafin::cuda {

class OpTimer {
 public:
  enum Category : uint8_t { kSpine, kExpert };

  explicit OpTimer(cudaStream_t stream);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // An event pair around the ops enqueued while it lives (nothing when profiling is off).
  class Scope {
   public:
    Scope(OpTimer* timer, Category category);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpTimer* timer_;
    Category category_;
    cudaEvent_t start_ = nullptr;
  };
  Scope scope(Category category) { return Scope(enabled_ ? this : nullptr, category); }

  void add_upload(double seconds, uint64_t bytes);  // any thread
  // Sums the pairs the stream has passed; call after a synchronisation of the stream.
  void resolve();
  DeviceTimes times();  // synchronises the stream, then resolves

 private:
  struct Pair {
    cudaEvent_t start, end;
    Category category;
  };
  cudaEvent_t event();

  cudaStream_t stream_;
  bool enabled_;
  std::vector<Pair> pending_;
  std::vector<cudaEvent_t> spare_;
  std::mutex upload_mutex_;
  DeviceTimes totals_;
};

}  // namespace deltafin::cuda
