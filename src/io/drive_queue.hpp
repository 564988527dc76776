// One drive's I/O queue: a pool of `depth` threads issuing positional reads, so up to `depth`
// reads are in flight on that drive. It measures the drive (bytes, reads, busy time) so that a
// read of a replicated expert can go to the holder with the lowest expected completion time:
// (bytes in flight + the new read) / the drive's measured bandwidth.
// Reads never throw into the caller: every job's `done` is called exactly once, with the error
// (std::exception_ptr) or nullptr. Demand reads are served before prefetch reads. A job whose
// `cancel` flag is set when its turn comes is not read: `done` gets a ReadCancelled.
//
// Busy time (DriveStats::busy_seconds, the receipt's I/O time) is the time with at least one
// read in flight on the drive.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "util/read_only_file.hpp"

namespace deltafin {

// What `done` gets for a job skipped because its cancel flag was set (not a drive failure).
struct ReadCancelled : std::exception {
  const char* what() const noexcept override { return "read cancelled"; }
};

inline bool is_cancelled(const std::exception_ptr& error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const ReadCancelled&) {
    return true;
  } catch (...) {
  }
  return false;
}

struct ReadJob {
  const ReadOnlyFile* file = nullptr;
  uint64_t offset = 0, length = 0;
  std::byte* dst = nullptr;
  bool bypass = true;  // around the page cache (ReadOnlyFile::read_uncached)
  bool urgent = true;  // demand reads go before guesses (prefetch)
  std::shared_ptr<const std::atomic<bool>> cancel;  // set: skip the read if it has not started
  std::function<void(std::exception_ptr)> done;
};

struct DriveStats {
  std::string name;
  uint64_t bytes = 0;
  uint64_t reads = 0;
  uint64_t errors = 0;
  uint64_t bad_copies = 0;  // records read from it that failed their check (XXH3, or NaN/Inf in an expert)
  double busy_seconds = 0;  // time with at least one read in flight
  bool failed = false;
};

class DriveQueue {
 public:
  DriveQueue(std::string name, int depth);
  ~DriveQueue();
  DriveQueue(const DriveQueue&) = delete;
  DriveQueue& operator=(const DriveQueue&) = delete;

  void submit(ReadJob job);
  // Seconds until a new read of `bytes` would complete, by bytes queued or in flight and the
  // measured bandwidth.
  double expected_seconds(uint64_t bytes) const;
  // A drive that failed a read is avoided while another holder exists.
  bool failed() const;
  void mark_failed();
  // A drive that returned a record failing its check: still read, but after the other holders.
  // Each call counts one bad copy (DriveStats::bad_copies).
  bool suspect() const;
  void mark_suspect();
  DriveStats stats() const;
  const std::string& name() const { return name_; }

 private:
  void work();
  void stop();  // ends and joins every reader thread (destructor, failed start)

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<ReadJob> urgent_, later_;  // demand reads first, then prefetch
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  bool failed_ = false;
  bool suspect_ = false;
  uint64_t pending_bytes_ = 0;  // queued + in flight
  int in_flight_ = 0;
  double busy_since_ = 0;       // monotonic seconds when in_flight_ went 0 -> 1
  DriveStats stats_;
};

}  // namespace deltafin
