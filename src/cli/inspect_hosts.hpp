// `deltafin inspect --memory-gb G --drive-gbps X,... --hosts N [--link 10gbe|tb5|GBPS:RTT_US]`:
// the projected decode rate of the model on N equal hosts, each with G GB of memory and those
// drives (issue 35: routed experts across hosts on MPI). Rank 0 keeps inspect's memory plan (the
// spine, its share of the experts cached in what is left); every other host caches its share as
// an expert host does (expert_host_cache). A MoE layer takes its busiest host's time (misses read
// from that host's drives, the expert op) expected under uniform routing, plus one round trip of
// the messages of hosts/wire.hpp to the other hosts; rank 0 adds the spine. docs/hosts-projection.md works it
// by hand for the real Kimi K3 and names the sources of the compute rates and link figures.
#pragma once

#include <cstdint>
#include <string>

#include "cli/inspect_plan.hpp"
#include "model/family.hpp"

namespace deltafin::cli {

struct HostsFlags {
  bool given = false;  // --hosts given: the projection is printed
  int64_t hosts = 0;
  std::string link;   // "10gbe", "tb5", "GBPS:RTT_US"; empty: both presets
};

// Refuses bad --hosts and --link values, and --hosts without a one-pool plan with drives, in one
// line naming the flag (before inspect prints anything).
void check_hosts_flags(const FamilyDescription& d, const PlanFlags& plan, const HostsFlags& h);

// Prints the projection lines (nothing without --hosts).
void print_hosts_projection(const FamilyDescription& d, const PrintedPlan& plan, const HostsFlags& h);

}  // namespace deltafin::cli
