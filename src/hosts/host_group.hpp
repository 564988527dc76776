// The hosts of a run: the ranks `mpirun -n N deltafin ...` started, and byte messages between
// them over MPI (Open MPI on Linux and macOS; no transport of our own). One process per host;
// rank 0 runs the model, ranks 1..N-1 run their share of the routed experts (hosts/expert_host.hpp).
//   start_hosts(): called by main() first. Launched by mpirun (its environment says so), it
//     initializes MPI; a build without MPI refuses a launch of more than one rank in one line.
//     Started without mpirun, nothing changes: host_group() is nullptr.
//   HostGroup: send() queues a message (it goes out while later calls wait); receive() waits
//     for the next message from one rank or any, at most `timeout` seconds (every wait is
//     bounded). Messages are ordered per pair of ranks. Calls come from one thread at a time.
//   finish_hosts(): MPI_Finalize at the end; abort_hosts(): ends every rank at once (a host
//     that hangs cannot be waited for), with exit code 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deltafin::hosts {

using Bytes = std::vector<std::byte>;

struct Received {
  int from = -1;
  Bytes bytes;
};

class HostGroup {
 public:
  virtual ~HostGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string processor_name() const = 0;  // this host's name (MPI_Get_processor_name)
  // This rank among the ranks of the run on its own machine (MPI's shared-memory split), and
  // how many those are: what picks its GPU (hosts/local_device.hpp).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual void send(int to, Bytes message) = 0;
  // The next message from `from` (-1: any rank), or nullopt after `timeout` seconds.
  virtual std::optional<Received> receive(int from, double timeout) = 0;
  // Waits until every queued send has gone out, at most `timeout` seconds; false when one has not.
  virtual bool flush(double timeout) = 0;
  // Time spent waiting in receive() and flush() (the network's share, as far as this rank sees it).
  virtual double wait_seconds() const = 0;
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;
};

// Whether this build can run on several hosts (it was built with MPI).
bool hosts_supported();
// main(): before anything else (argc/argv as main got them).
void start_hosts(int* argc, char*** argv);
// The hosts of this run, or nullptr when it runs on one host (no mpirun, or mpirun -n 1).
HostGroup* host_group();
// main(): at the end of every rank.
void finish_hosts();
// Ends all ranks now, exit code 1 (after this rank printed why).
[[noreturn]] void abort_hosts();

}  // namespace deltafin::hosts
