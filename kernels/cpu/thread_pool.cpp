// Persistent worker threads for ThreadPool::parallel_for (see thread_pool.hpp).
//
// The caller publishes a job (its function, n, and a new ticket), wakes workers only if some are
// asleep, then claims chunks itself like any worker; it waits only for chunks that another thread
// has already claimed and not yet finished. Claiming is one compare-exchange on the ticket, which
// carries the job's generation, so a late worker can never claim a chunk of a job that is over.
// Idle workers poll for a short bounded time, then sleep on epoch_ (a futex on Linux).
#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <system_error>
#include <utility>

#include <deltafin/error.hpp>
#include <fmt/format.h>

namespace deltafin::cpu {
namespace {
constexpr std::chrono::microseconds kSpinTime{50};  // how long a wait polls before it sleeps or yields
constexpr int64_t kChunksPerThread = 4;            // chunks a job is split into, per participant
constexpr int64_t kMaxChunks = 0xffff;             // the ticket's 16-bit fields

// A hint to the core that this is a spin-wait loop.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls done() until it holds: spinning for kSpinTime, then giving the core away between polls
// (on a busy machine, to the very thread that is being waited for, perhaps).
template <class Pred>
void wait_until(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  bool spinning = true;
  for (int polls = 1; !done(); ++polls) {
    if (!spinning) std::this_thread::yield();
    else if (polls % 64 != 0) cpu_relax();
    else spinning = std::chrono::steady_clock::now() < deadline;
  }
}

uint32_t generation_of(uint64_t ticket) { return static_cast<uint32_t>(ticket >> 32); }
int64_t count_of(uint64_t ticket) { return static_cast<int64_t>((ticket >> 16) & 0xffff); }
int64_t next_of(uint64_t ticket) { return static_cast<int64_t>(ticket & 0xffff); }
}  // namespace

ThreadPool::ThreadPool(int threads) : size_(std::max(threads, 1)) {
  try {
    workers_.reserve(size_ - 1);
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {  // a pids or memory limit: stop the ones started, say so
    const size_t started = workers_.size();
    stop_workers();
    throw Error(fmt::format("cannot start {} worker threads ({} started: {}); try a smaller --threads", size_ - 1, started, e.what()));
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  stop_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  epoch_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

int64_t ThreadPool::chunks(int64_t n) const {
  if (n <= 1 || size_ == 1) return 1;
  return std::min({n, kChunksPerThread * size_, kMaxChunks});
}

void ThreadPool::run_chunk(int64_t index, int64_t count) {
  const int64_t begin = job_n_ * index / count;
  const int64_t end = job_n_ * (index + 1) / count;
  try {
    (*job_)(begin, end);
  } catch (...) {
    std::lock_guard lock(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::run_chunks(uint32_t generation) {
  uint64_t ticket = ticket_.load(std::memory_order_acquire);
  while (generation_of(ticket) == generation && next_of(ticket) < count_of(ticket)) {
    if (!ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;  // `ticket` now holds the current value
    run_chunk(next_of(ticket), count_of(ticket));
    done_.fetch_add(1, std::memory_order_acq_rel);
    ticket = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  const int64_t count = chunks(n);
  if (count == 1) return fn(0, n);

  std::lock_guard call_lock(call_mu_);
  job_ = &fn;
  job_n_ = n;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = ++generation_;
  ticket_.store(uint64_t{generation} << 32 | static_cast<uint64_t>(count) << 16, std::memory_order_seq_cst);
  epoch_.store(generation, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();

  run_chunks(generation);
  // Only chunks another thread has claimed remain, under way.
  wait_until([&] { return done_.load(std::memory_order_acquire) == count; });

  job_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard lock(error_mu_);
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

uint32_t ThreadPool::wait_for_job(uint32_t seen) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int polls = 0;; ++polls) {
    if (epoch_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_relaxed)) break;
    cpu_relax();
    if (polls % 64 == 63 && std::chrono::steady_clock::now() >= deadline) {
      // Sleep. The increment is ordered before the epoch load, and the caller's epoch store
      // before its sleepers_ load, so either it sees a sleeper and notifies, or we see the job.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (epoch_.load(std::memory_order_seq_cst) == seen && !stop_.load(std::memory_order_seq_cst))
        epoch_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
  }
  return stop_.load(std::memory_order_acquire) ? seen : epoch_.load(std::memory_order_acquire);
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    const uint32_t generation = wait_for_job(seen);
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation;
    run_chunks(generation);
  }
}

}  // namespace deltafin::cpu
