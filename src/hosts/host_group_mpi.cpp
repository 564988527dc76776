// HostGroup over MPI (host_group.hpp): non-blocking sends kept until they complete, receives by
// probing with a deadline, so that no wait is unbounded. MPI is initialized with
// MPI_THREAD_SERIALIZED: the engine's thread (main's, or serve's generator) makes the calls,
// one at a time.
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>
#include <thread>

#include "hosts/host_group.hpp"
#include "util/error.hpp"

namespace deltafin::hosts {
namespace {

constexpr int kTag = 7;

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

class MpiGroup final : public HostGroup {
 public:
  MpiGroup() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    MPI_Get_processor_name(name, &length);
    name_.assign(name, static_cast<size_t>(length));
    MPI_Comm machine;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &machine);
    MPI_Comm_rank(machine, &local_rank_);
    MPI_Comm_size(machine, &local_size_);
    MPI_Comm_free(&machine);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string processor_name() const override { return name_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void send(int to, Bytes message) override {
    if (message.size() > static_cast<size_t>(INT32_MAX)) fail("a message to rank {} of {} bytes is too large for MPI", to, message.size());
    auto pending = std::make_unique<Pending>();
    pending->bytes = std::move(message);
    MPI_Isend(pending->bytes.data(), static_cast<int>(pending->bytes.size()), MPI_BYTE, to, kTag, MPI_COMM_WORLD,
              &pending->request);
    sent_ += pending->bytes.size();
    sends_.push_back(std::move(pending));
    progress();
  }

  std::optional<Received> receive(int from, double timeout) override {
    const auto start = Clock::now();
    for (int spins = 0;; ++spins) {
      progress();
      int ready = 0;
      MPI_Status status;
      MPI_Iprobe(from < 0 ? MPI_ANY_SOURCE : from, kTag, MPI_COMM_WORLD, &ready, &status);
      if (ready) {
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        Received r;
        r.from = status.MPI_SOURCE;
        r.bytes.resize(static_cast<size_t>(count));
        MPI_Recv(r.bytes.data(), count, MPI_BYTE, r.from, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        received_ += r.bytes.size();
        waited_ += seconds_since(start);
        return r;
      }
      if (seconds_since(start) > timeout) {
        waited_ += seconds_since(start);
        return std::nullopt;
      }
      pause(spins);
    }
  }

  bool flush(double timeout) override {
    const auto start = Clock::now();
    for (int spins = 0; !sends_.empty(); ++spins) {
      progress();
      if (sends_.empty()) break;
      if (seconds_since(start) > timeout) break;
      pause(spins);
    }
    waited_ += seconds_since(start);
    return sends_.empty();
  }

  double wait_seconds() const override { return waited_; }
  uint64_t bytes_sent() const override { return sent_; }
  uint64_t bytes_received() const override { return received_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    Bytes bytes;
    MPI_Request request;
  };
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
  // Busy for the first polls (a reply is often microseconds away), then 50 us sleeps: a waiting
  // rank must not take the CPU from one that computes (several ranks on one machine ran 1.4x
  // slower next to ranks spinning in MPI_Recv; k3-public-bench docs/benchmarks.md), and an idle
  // server's hosts wait here for hours. Costs at most 50 us a wait: ~5 ms a K3 token.
  static void pause(int spins) {
    if (spins < 64) return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Completes sends that have gone out (oldest first; MPI moves the rest while we poll).
  void progress() {
    while (!sends_.empty()) {
      int done = 0;
      MPI_Test(&sends_.front()->request, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      sends_.pop_front();
    }
  }

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string name_;
  std::deque<std::unique_ptr<Pending>> sends_;
  double waited_ = 0;
  uint64_t sent_ = 0, received_ = 0;
};

bool initialized = false;
std::unique_ptr<MpiGroup> group;

}  // namespace

bool hosts_supported() { return true; }

void start_hosts(int* argc, char*** argv) {
  if (!launched_by_mpirun()) return;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  initialized = true;
  if (provided < MPI_THREAD_SERIALIZED) fail("this MPI library cannot be called from more than one thread (MPI_THREAD_SERIALIZED)");
  auto g = std::make_unique<MpiGroup>();
  if (g->size() > 1) group = std::move(g);
}

HostGroup* host_group() { return group.get(); }

void finish_hosts() {
  if (!initialized) return;
  if (group) group->flush(10);
  group.reset();
  MPI_Finalize();
  initialized = false;
}

void abort_hosts() {
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

}  // namespace deltafin::hosts
