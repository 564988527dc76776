// The expert store's cache replayed over a routing trace (weights/routing_trace.hpp), at any
// budget, drive count and speculation width, without reading a byte: the store's own policy
// (io/cache_policy.hpp) chooses every victim, and the store's bookkeeping is followed step by
// step (begin_pass; per MoE layer the pass's union requested in ascending order, hits counted
// where the expert is held, misses read in request order as room is made; rejected drafts'
// experts made cold by rewinds). The router lookahead's guesses are not in a trace: compare with
// runs without --lookahead. On the same trace and budget the counts equal the engine's receipt
// (hits, reads, expert bytes read) whenever each layer's union fits the budget; below that the
// store's reads wait for one another and the simulator takes them to land in request order. Each
// host of a run on several hosts is simulated on its own (CacheSimOptions::share).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "io/cache_policy.hpp"
#include "weights/routing_trace.hpp"

namespace deltafin {

struct CacheSimOptions {
  uint64_t budget_bytes = 0;  // the store's expert budget (slots of header.slot_bytes)
  int drives = 1;  // records striped expert % drives
  // > 0: the trace's decode passes regrouped into verify passes of `verify_width` positions
  // (every draft accepted: the fewest passes speculation can take).
  int64_t verify_width = 0;
  // Several hosts (mpirun): the experts of a pass's union at a layer that this host's store is
  // asked for (rank 0 shares each pass out: hosts/expert_owners.hpp); empty: all of them.
  std::function<std::vector<int32_t>(int64_t layer, std::span<const int32_t> pass_union)> share;
  // An expert host (rank > 0): its store starts a pass at a request whose layer does not follow the
  // last one's (hosts/expert_host.cpp), sees no request where it has no share, and no rewinds.
  bool expert_host = false;
  CachePolicyOptions policy;
};

struct CacheSimResult {
  uint64_t hits = 0, misses = 0, bytes_read = 0;
  uint64_t decode_bytes_read = 0;      // in decode and verify passes
  uint64_t decode_positions = 0;       // positions those passes committed (verify: all of them)
  uint64_t passes = 0, slots = 0;
  std::vector<uint64_t> drive_bytes;   // bytes read from each drive
  double bytes_per_decoded_token() const { return decode_positions ? double(decode_bytes_read) / double(decode_positions) : 0; }
};

CacheSimResult simulate_cache(const RoutingTrace& trace, const CacheSimOptions& options);
// Belady's bound (CachePolicyOptions::next_request): what no policy can beat at that budget.
CacheSimResult simulate_oracle(const RoutingTrace& trace, CacheSimOptions options);

}  // namespace deltafin
