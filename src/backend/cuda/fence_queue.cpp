// FenceQueue (see fence_queue.hpp).
#include "backend/cuda/fence_queue.hpp"

#include "backend/cuda/cuda_check.hpp"

namespace deltafin::cuda {

FenceQueue::~FenceQueue() {  // errors here have nowhere to go; the pins are released regardless
  (void)cudaStreamSynchronize(stream_);
  for (Pending& p : pending_) (void)cudaEventDestroy(p.event);
  for (cudaEvent_t e : spare_) (void)cudaEventDestroy(e);
  (void)cudaGetLastError();
}

uint64_t FenceQueue::record(Pins pins) {
  cudaEvent_t event;
  if (spare_.empty()) {
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  } else {
    event = spare_.back();
    spare_.pop_back();
  }
  const cudaError_t status = cudaEventRecord(event, stream_);
  if (status != cudaSuccess) {
    spare_.push_back(event);
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // then the pins may go
    check(status, "cudaEventRecord");
  }
  pending_.push_back({next_, event, std::move(pins)});
  return next_++;
}

void FenceQueue::retire_front() {
  spare_.push_back(pending_.front().event);
  pending_.pop_front();  // releases its pins
}

void FenceQueue::hold(uint64_t fence, std::shared_ptr<const void> pin) {
  if (fence >= next_) fail("cuda backend: hold_until() on fence {}, which was never committed (the last is {})", fence, last());
  if (!pending_.empty() && fence >= pending_.front().fence)
    pending_[fence - pending_.front().fence].pins.push_back(std::move(pin));
}

void FenceQueue::wait(uint64_t fence) {
  if (fence >= next_) fail("cuda backend: wait() on fence {}, which was never committed (the last is {})", fence, last());
  // pending_ holds the consecutive fences from its front to the last; earlier ones have passed.
  if (!pending_.empty() && fence >= pending_.front().fence) {
    check(cudaEventSynchronize(pending_[fence - pending_.front().fence].event), "cudaEventSynchronize");
    while (!pending_.empty() && pending_.front().fence <= fence) retire_front();
  }
  poll();
}

void FenceQueue::poll() {
  while (!pending_.empty()) {
    const cudaError_t status = cudaEventQuery(pending_.front().event);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: the fence is still ahead
      return;
    }
    check(status, "cudaEventQuery");
    retire_front();
  }
}

void FenceQueue::drain() {
  while (!pending_.empty()) retire_front();
}

}  // namespace deltafin::cuda
