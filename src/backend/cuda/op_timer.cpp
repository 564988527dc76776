// OpTimer (op_timer.hpp): event pairs per op, resolved after the stream's synchronisations.
#include "backend/cuda/op_timer.hpp"

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.hpp"

namespace deltafin::cuda {

OpTimer::OpTimer(cudaStream_t stream) : stream_(stream) {
  const char* flag = std::getenv("DELTAFIN_DEVICE_PROFILE");
  enabled_ = flag && std::strcmp(flag, "1") == 0;
}

OpTimer::~OpTimer() {
  for (const Pair& p : pending_) (void)cudaEventDestroy(p.start), (void)cudaEventDestroy(p.end);
  for (cudaEvent_t e : spare_) (void)cudaEventDestroy(e);
  (void)cudaGetLastError();
}

cudaEvent_t OpTimer::event() {
  if (!spare_.empty()) {
    cudaEvent_t e = spare_.back();
    spare_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate (profile)");
  return e;
}

OpTimer::Scope::Scope(OpTimer* timer, Category category) : timer_(timer), category_(category) {
  if (!timer_) return;
  start_ = timer_->event();
  check(cudaEventRecord(start_, timer_->stream_), "cudaEventRecord (profile)");
}

OpTimer::Scope::~Scope() {
  if (!timer_) return;
  cudaEvent_t end = timer_->event();
  (void)cudaEventRecord(end, timer_->stream_);
  timer_->pending_.push_back({start_, end, category_});
}

void OpTimer::add_upload(double seconds, uint64_t bytes) {
  if (!enabled_) return;
  std::lock_guard lock(upload_mutex_);
  totals_.upload_seconds += seconds, totals_.upload_bytes += bytes;
}

void OpTimer::resolve() {
  for (const Pair& p : pending_) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.start, p.end) != cudaSuccess) (void)cudaGetLastError();
    (p.category == kExpert ? totals_.expert_seconds : totals_.spine_seconds) += ms / 1e3;
    spare_.push_back(p.start), spare_.push_back(p.end);
  }
  pending_.clear();
}

DeviceTimes OpTimer::times() {
  if (!enabled_) return {};
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (profile)");
  resolve();
  std::lock_guard lock(upload_mutex_);
  return totals_;
}

}  // namespace deltafin::cuda
