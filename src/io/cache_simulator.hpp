// The expert store's cache replayed over a routing trace (model/routing_trace.hpp), at any
// budget, drive count and speculation width, without reading a byte: the store's own policy
// (io/cache_policy.hpp) chooses every victim, and the store's bookkeeping is followed step by
// step (begin_pass; per MoE layer the pass's union requested in ascending order, hits counted
// where the expert is held, misses read in request order as room is made; rejected drafts'
// experts made cold by rewinds). The router lookahead's guesses are not in a trace: compare with
// runs without --lookahead. On the same trace and budget the counts equal the engine's receipt
// (hits, reads, expert bytes read) whenever each layer's union fits the budget; below that the
// store's reads wait for one another and the simulator takes them to land in request order.
#pragma once

#include <cstdint>
#include <vector>

#include "io/cache_policy.hpp"
#include "model/routing_trace.hpp"

namespace deltafin {

struct CacheSimOptions {
  uint64_t budget_bytes = 0;  // the store's expert budget (slots of header.slot_bytes)
  int drives = 1;
  // Record (layer, expert)'s drive: [moe layer index][expert]; empty: expert % drives.
  std::vector<std::vector<int>> drive_of;
  // > 0: the trace's decode passes regrouped into verify passes of `verify_width` positions
  // (every draft accepted: the fewest passes speculation can take).
  int64_t verify_width = 0;
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

}  // namespace deltafin
