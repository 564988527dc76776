// Ranks 1..N-1 of a run on several hosts: an expert host. It has opened its share of the routed
// experts (its own drives, store and budget; decode/expert_host_engine.cpp) and serves rank 0:
// a Request starts its reads (a layer at or below the last one begins a new pass), the Run that
// follows runs those experts over the pass's rows on this host's backend and answers with their
// output rows by slot; Stop ends it. An expert it cannot read is listed in the Result, not fatal.
// Anything else that goes wrong is sent to rank 0 as a Failure, and the host waits (bounded) to
// be stopped.
#pragma once

#include "backend/backend.hpp"
#include "hosts/host_group.hpp"
#include "io/expert_store.hpp"

namespace deltafin::hosts {

// Serves until rank 0 sends Stop (returns 0) or something fails (returns 1 after telling rank 0).
int serve_experts(HostGroup& group, Backend& backend, ExpertStore& store);

}  // namespace deltafin::hosts
