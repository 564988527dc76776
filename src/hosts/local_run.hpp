// Runs experts of this host's store over part of a pass's union, as LocalExperts::run_part
// does, but an expert whose record cannot be read (every copy on this host's drives failed) is
// reported instead of ending the pass: the others are run, and the caller (rank 0) has another
// host run the failed ones where one holds them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/routed_experts.hpp"

namespace deltafin::hosts {

struct FailedExperts {
  std::vector<int32_t> experts;  // ascending
  std::string message;           // the first failure's
};

// first[i]: the first position that chose experts[i] (for the retry's request).
FailedExperts run_local(LocalExperts& local, int64_t layer, std::span<const int32_t> experts,
                        std::span<const int64_t> rows, std::span<const int64_t> first, const ExpertWork& work);

}  // namespace deltafin::hosts
