// Persistent worker threads for ThreadPool::parallel_for (see thread_pool.hpp).
//
// A job is published under mu_ by bumping generation_; each worker reads it under mu_, runs its
// own range (if the job has one), and the last to finish wakes the caller. Waits poll for a short
// bounded time before sleeping, which keeps back-to-back kernel launches cheap without burning
// idle cores.
#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <system_error>
#include <utility>

#include "util/error.hpp"

namespace deltafin::cpu {
namespace {
constexpr std::chrono::microseconds kSpinTime{50};  // how long a wait polls before it sleeps

// Polls done() (yielding the core between polls) for up to kSpinTime; returns done().
template <class Pred>
bool spin_until(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::yield();
  }
  return done();
}
}  // namespace

ThreadPool::ThreadPool(int threads) : size_(std::max(threads, 1)) {
  try {
    workers_.reserve(size_ - 1);
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  } catch (const std::system_error& e) {  // a pids or memory limit: stop the ones started, say so
    const size_t started = workers_.size();
    stop_workers();
    fail("cannot start {} worker threads ({} started: {}); try a smaller --threads", size_ - 1, started, e.what());
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

void ThreadPool::run_range(int index) {
  const int64_t begin = job_n_ * index / job_ranges_;
  const int64_t end = job_n_ * (index + 1) / job_ranges_;
  try {
    (*job_)(begin, end);
  } catch (...) {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  if (size_ == 1 || n == 1) return fn(0, n);

  std::lock_guard call_lock(call_mu_);
  const int ranges = static_cast<int>(std::min<int64_t>(size_, n));
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_ranges_ = ranges;
    error_ = nullptr;
    pending_.store(ranges - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_relaxed);
  }
  wake_cv_.notify_all();

  run_range(0);
  if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }

  std::exception_ptr error;
  {
    std::lock_guard lock(mu_);
    job_ = nullptr;
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_relaxed) != seen; });
    bool takes_part;
    {
      // The job's generation and range count are read together under the lock; a later job
      // cannot start before every range of this one has finished.
      std::unique_lock lock(mu_);
      wake_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      takes_part = index < job_ranges_;
    }
    if (!takes_part) continue;

    run_range(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace deltafin::cpu
