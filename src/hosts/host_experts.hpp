// Rank 0's producer of routed-expert outputs on several hosts (model/routed_experts.hpp's seam):
// each pass's union is split between the experts' holders (hosts/expert_owners.hpp: preferred
// holders, evened out where an expert has several). request() starts this host's
// reads and sends each other host its Request; run() sends them the pass's rows and routing,
// runs this host's experts meanwhile, then writes each host's output rows into their slots of
// work.y. The combine (ascending expert order) stays with the model on rank 0, so the output is
// bit-identical to one host whatever the assignment.
// Faults: an expert a host cannot read goes to its next holder (this host or another); a host
// that does not answer within the timeout, sends a Failure, or answers with slots that are not
// its experts' ends the run in one line naming it (deltafin::Error; main then stops every rank).
// The model's lookahead prefetches into this host's store only (hosts/ have no prefetch).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hosts/expert_owners.hpp"
#include "hosts/host_group.hpp"
#include "hosts/wire.hpp"
#include "model/routed_experts.hpp"

namespace deltafin::hosts {

// What rank 0 saw of one host over the run (the receipt's per-host lines).
struct HostReport {
  int rank = 0;
  std::string name;
  HostCounters counters;             // the host's own, as of its last Result
  uint64_t experts = 0;              // expert runs it did (layer, expert) per pass
  uint64_t round_trips = 0;          // Run -> Result exchanges
  double round_trip_seconds = 0;     // from sending a Run to its Result arriving
  double stall_seconds = 0;          // rank 0 waiting for its Result after rank 0's own experts
  double network_seconds = 0;        // of that wait, what the round trip less the host's work explains
  uint64_t bytes_to = 0, bytes_from = 0;  // message bytes
  uint64_t failed_over = 0;          // its experts another host ran because it could not read them
};

class HostExperts final : public ExpertProducer {
 public:
  // `layers` x `experts`: the routed-expert table's shape (for usage()).
  HostExperts(Backend& backend, ExpertStore& store, HostGroup& group, ExpertOwners owners, std::vector<std::string> names,
              double timeout, int64_t layers, int64_t experts);
  ~HostExperts() override;  // stops the other hosts (not while an error unwinds: main aborts them)

  void request(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> first_positions) override;
  void run(int64_t layer, std::span<const int32_t> experts, const ExpertWork& work) override;

  // Rank 0 is reports[0] (its counters are the engine's own).
  const std::vector<HostReport>& reports() const { return reports_; }
  // Requests per (layer, expert) on every host, as ExpertStore::usage() counts them on one.
  const std::vector<std::vector<uint64_t>>& usage() const { return usage_; }

 private:
  struct Share {  // one host's part of the pass at a layer
    std::vector<int32_t> experts;
    std::vector<int64_t> rows, first;  // lists row and first position of each
  };
  // Splits `experts` (with their rows and first positions) by owner; throws when one has none left.
  std::vector<Share> split(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> rows,
                           std::span<const int64_t> first) const;
  void send_request(int host, int64_t layer, const Share& share);
  void send_run(int host, int64_t layer, const Share& share, const ExpertWork& work);
  // Runs `shares` (by host): the other hosts' Runs (their Requests first unless `requested`),
  // this host's part meanwhile, then every Result; the experts that failed, by host.
  std::vector<Share> dispatch(int64_t layer, const std::vector<Share>& shares, const ExpertWork& work, bool requested);
  // The part of `share` that is `experts` (ascending, each one of the share's).
  static Share pick(const Share& share, std::span<const int32_t> experts);
  // Receives every Result of `waiting` and writes its rows; the experts that failed, by host.
  std::vector<Share> collect(int64_t layer, std::vector<Share>& waiting, const ExpertWork& work);
  std::string label(int host) const;

  LocalExperts local_;
  Backend& backend_;
  HostGroup& group_;
  ExpertOwners owners_;
  std::vector<std::string> names_;
  double timeout_;
  std::vector<HostReport> reports_;
  std::vector<Share> pass_;             // by host, the layer requested last
  int64_t pass_layer_ = -1;
  std::vector<int32_t> union_, ids_;    // the pass's union; its routing and rows (empty until a Run needs them)
  std::vector<float> x_;
  int64_t n_ = 0, k_ = 0;
  std::vector<std::chrono::steady_clock::time_point> sent_at_;
  std::string why_;  // the last read failure a host reported
  std::vector<std::vector<uint64_t>> usage_;
  int64_t experts_ = 0;
};

}  // namespace deltafin::hosts
