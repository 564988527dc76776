// The fences of one CUDA stream: events recorded in stream order and numbered 1, 2, 3, ...; as
// the stream runs in order, a fence has passed once its event has, and every earlier one with
// it. Expert pins ride on the fence recorded after the kernels that read them and are released
// (on the calling thread, in poll(), wait() or drain()) once it has passed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace deltafin::cuda {

class FenceQueue {
 public:
  using Pins = std::vector<std::shared_ptr<const void>>;

  explicit FenceQueue(cudaStream_t stream) : stream_(stream) {}
  ~FenceQueue();  // waits for the stream, then releases every pin
  FenceQueue(const FenceQueue&) = delete;
  FenceQueue& operator=(const FenceQueue&) = delete;

  // A fence after everything enqueued so far, holding `pins` until it has passed.
  uint64_t record(Pins pins = {});
  // Adds `pin` to a recorded fence's pins; a fence that has passed lets go of it at once.
  void hold(uint64_t fence, std::shared_ptr<const void> pin);
  void wait(uint64_t fence);  // blocks until it has passed; a fence never recorded is an error
  void poll();                // retires the fences that have passed
  void drain();               // after a synchronisation of the stream: everything has passed
  uint64_t last() const { return next_ - 1; }

 private:
  struct Pending {
    uint64_t fence;
    cudaEvent_t event;
    Pins pins;
  };
  void retire_front();

  cudaStream_t stream_;
  std::deque<Pending> pending_;      // ascending fences, not yet known to have passed
  std::vector<cudaEvent_t> spare_;   // events of retired fences, for reuse
  uint64_t next_ = 1;
};

}  // namespace deltafin::cuda
