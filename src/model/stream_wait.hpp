// Entering a spine unit with the time it took: SpineStream::enter blocks the compute thread until
// a streamed unit's reads have landed, and that time counts in PassStats::spine_wait_seconds
// (with the expert store's waits, the time the compute thread waited on reads: the receipt's
// overlap line).
#pragma once

#include <chrono>
#include <cstdint>

#include "io/spine_stream.hpp"
#include "model/routed_experts.hpp"

namespace deltafin {

// stream nullptr: the whole spine is resident, nothing to wait for.
inline void enter_unit(SpineStream* stream, int64_t unit, PassStats& stats) {
  if (!stream) return;
  const auto start = std::chrono::steady_clock::now();
  stream->enter(unit);
  stats.spine_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace deltafin
