// A small persistent thread pool for the CPU kernels.
//
// parallel_for splits [0, n) into contiguous ranges, one per participating thread (the caller
// runs the first), and returns when all are done. The split depends only on n and size(), never
// on timing. Idle workers spin briefly, then sleep on a condition variable. Calls from several
// threads are serialised; calling parallel_for from inside fn is not supported (it deadlocks).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltafin::cpu {

class ThreadPool {
 public:
  // threads: total participants including the caller (values below 1 are taken as 1).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Runs fn(begin, end) over contiguous ranges covering [0, n), blocking until all return. The
  // first exception thrown by fn is rethrown here after every range has finished.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int index);
  void stop_workers();        // ends and joins every worker (destructor, failed start)
  void run_range(int index);  // range `index` of the current job

  int size_;
  std::vector<std::thread> workers_;  // [size_ - 1]; worker i runs range i + 1

  std::mutex call_mu_;  // serialises parallel_for callers

  std::mutex mu_;  // guards the job fields and both condition variables' predicates
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
  std::atomic<uint64_t> generation_{0};  // bumped once per job
  std::atomic<int> pending_{0};          // worker ranges of the current job not yet finished
  bool stop_ = false;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_ranges_ = 0;
  std::exception_ptr error_;  // first exception of the current job
};

}  // namespace deltafin::cpu
