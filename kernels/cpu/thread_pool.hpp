// A small persistent thread pool for the CPU kernels.
//
// parallel_for splits [0, n) into a fixed number of contiguous chunks (chunks(n): a function of n
// and size() only, never of timing) and returns when every chunk has run. Chunks are claimed
// from one atomic ticket by whichever thread gets there first, the caller included, so a worker
// that the OS has descheduled costs nothing: the caller runs the chunks it has not claimed and
// waits only for chunks already under way. A chunk's result must not depend on which thread runs
// it (the kernels keep no per-thread state), so outputs are the same bits for any thread count
// and any timing. Idle workers spin briefly, then sleep until the next job. Calls from several
// threads are serialised; calling parallel_for from inside fn is not supported (it deadlocks).
#pragma once

#include <atomic>
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

  // How many chunks parallel_for(n, ...) splits [0, n) into (1 when n <= 1 or size() == 1).
  int64_t chunks(int64_t n) const;

  // Runs fn(begin, end) over chunks covering [0, n), blocking until all return. The first
  // exception thrown by fn is rethrown here after every chunk has finished.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop();
  void stop_workers();                  // ends and joins every worker (destructor, failed start)
  uint32_t wait_for_job(uint32_t seen);  // the next job's generation (after `seen`), or `seen` on stop
  void run_chunks(uint32_t generation);  // claims and runs chunks of that job until none is left
  void run_chunk(int64_t index, int64_t count);

  int size_;
  std::vector<std::thread> workers_;  // [size_ - 1]

  std::mutex call_mu_;  // serialises parallel_for callers
  uint32_t generation_ = 0;  // of the current job; written by the caller only

  // The claim ticket: generation (high 32 bits) | chunk count (16) | next unclaimed chunk (16).
  // A successful compare-exchange on it owns one chunk of that generation's job.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> done_{0};        // chunks of the current job finished
  std::atomic<uint32_t> epoch_{0};      // the latest generation; sleeping workers wait on it
  std::atomic<int> sleepers_{0};        // workers asleep (or about to be) on epoch_
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;  // valid while chunks are unfinished
  int64_t job_n_ = 0;

  std::mutex error_mu_;
  std::exception_ptr error_;  // first exception of the current job
};

}  // namespace deltafin::cpu
