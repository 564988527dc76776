// The messages between rank 0 and the expert hosts (hosts/host_group.hpp carries the bytes).
// Little-endian, a kind byte first, then the fields in order; decode() checks every length
// against the message's size and the shapes against each other, and throws deltafin::Error
// naming the sender (it is fuzzed: tests/test_hosts_wire.cpp).
//   Hello   host -> 0 once: what it runs (version, model, placement, backend), or why it could not open
//   Request 0 -> host: a pass's experts of that host at a layer (its reads start)
//   Run     0 -> host: the rows and routing of that pass's layer; the host runs the experts of the Request
//   Result  host -> 0: per slot (position * k + choice) routed to its experts, the unweighted output row;
//           experts it could not read are listed with the reason (rank 0 runs them elsewhere);
//           and the host's counters so far (the receipt's)
//   Stop    0 -> host: the run is over
//   Failure host -> 0: what went wrong outside the reads (the host then waits to be stopped)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "hosts/host_group.hpp"
#include "op_params.hpp"

namespace deltafin::hosts {

// Changed whenever a message changes; part of the version every host must share.
inline constexpr const char* kWireVersion = "deltafin-wire/1";

struct Hello {
  std::string version, host, model, placement, backend;
  std::string error;  // not empty: the host could not open its experts
};

struct Request {
  int64_t layer = 0;
  std::vector<int32_t> experts;  // ascending
  std::vector<int64_t> first;    // the first position that chose each
};

struct Run {
  int64_t layer = 0, n = 0, k = 0, in = 0, width = 0;
  GatedActivation act;
  std::vector<int32_t> experts;  // ascending: this host's experts of the pass
  std::vector<int32_t> all;      // ascending: the pass's union (every id of ids is one of them)
  std::vector<int32_t> ids;      // [n, k]
  std::vector<float> x;          // [n, in]
};

struct HostCounters {
  uint64_t expert_bytes_read = 0, hits = 0, misses = 0, runs = 0;
  double busy_seconds = 0;     // running Runs (reads waited for included)
  double io_wait_seconds = 0;  // of which waiting for reads
  double drive_busy_seconds = 0;  // its busiest drive's time with a read in flight
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t cache_budget_bytes = 0;
};

struct Result {
  int64_t layer = 0, in = 0;
  std::vector<int32_t> slots;    // ascending
  std::vector<float> rows;       // [slots, in]
  std::vector<int32_t> failed;   // experts that could not be read
  std::string failure;           // why (the first failure's message)
  HostCounters counters;
};

struct Stop {};

struct Failure {
  std::string message;
};

using Message = std::variant<Hello, Request, Run, Result, Stop, Failure>;

// The slots (position * k + choice, ascending) a Result for `experts` carries: those whose id in
// `ids` is one of `experts` and not one of `failed` (both ascending).
std::vector<int32_t> result_slots(std::span<const int32_t> ids, std::span<const int32_t> experts,
                                  std::span<const int32_t> failed);

Bytes encode(const Message& message);
// `from` names the sender in errors.
Message decode(const Bytes& bytes, int from);

}  // namespace deltafin::hosts
