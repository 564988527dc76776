// DriveQueue (see drive_queue.hpp).
#include "io/drive_queue.hpp"

#include <chrono>
#include <system_error>

#include "util/error.hpp"

namespace deltafin {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr double kPriorBandwidth = 1e9;     // bytes/s assumed until the drive has been measured
constexpr uint64_t kMeasuredAfter = 8 << 20;

}  // namespace

DriveQueue::DriveQueue(std::string name, int depth) : name_(std::move(name)) {
  stats_.name = name_;
  try {
    for (int i = 0; i < depth; ++i) threads_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {  // a pids or memory limit: stop the ones started, say so
    stop();
    fail("drive {}: cannot start {} reader threads: {}", name_, depth, e.what());
  }
}

DriveQueue::~DriveQueue() { stop(); }

void DriveQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void DriveQueue::submit(ReadJob job) {
  {
    std::lock_guard lock(mutex_);
    pending_bytes_ += job.length;
    (job.urgent ? urgent_ : later_).push_back(std::move(job));
  }
  wake_.notify_one();
}

double DriveQueue::expected_seconds(uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  const double bandwidth = stats_.bytes >= kMeasuredAfter && stats_.busy_seconds > 0
                               ? stats_.bytes / stats_.busy_seconds : kPriorBandwidth;
  return static_cast<double>(pending_bytes_ + bytes) / bandwidth;
}

bool DriveQueue::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void DriveQueue::mark_failed() {
  std::lock_guard lock(mutex_);
  failed_ = true;
}

bool DriveQueue::suspect() const {
  std::lock_guard lock(mutex_);
  return suspect_;
}

void DriveQueue::mark_suspect() {
  std::lock_guard lock(mutex_);
  suspect_ = true;
  ++stats_.bad_copies;
}

DriveStats DriveQueue::stats() const {
  std::lock_guard lock(mutex_);
  DriveStats s = stats_;
  s.failed = failed_;
  if (in_flight_ > 0) s.busy_seconds += now_seconds() - busy_since_;
  return s;
}

void DriveQueue::work() {
  for (;;) {
    ReadJob job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !urgent_.empty() || !later_.empty(); });
      std::deque<ReadJob>& queue = !urgent_.empty() ? urgent_ : later_;
      if (queue.empty()) return;  // stopping, nothing left
      job = std::move(queue.front());
      queue.pop_front();
      if (job.cancel && job.cancel->load()) {
        pending_bytes_ -= job.length;
        lock.unlock();
        job.done(std::make_exception_ptr(ReadCancelled()));
        continue;
      }
      if (in_flight_++ == 0) busy_since_ = now_seconds();
    }
    std::exception_ptr error;
    try {
      if (job.bypass) job.file->read_uncached(job.dst, job.length, job.offset);
      else job.file->read_exact(job.dst, job.length, job.offset);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      pending_bytes_ -= job.length;
      if (--in_flight_ == 0) stats_.busy_seconds += now_seconds() - busy_since_;
      if (error) ++stats_.errors;
      else stats_.bytes += job.length, ++stats_.reads;
    }
    job.done(error);
  }
}

}  // namespace deltafin
