// run_local (see local_run.hpp).
#include "hosts/local_run.hpp"

#include <deltafin/error.hpp>

namespace deltafin::hosts {

FailedExperts run_local(LocalExperts& local, int64_t layer, std::span<const int32_t> experts,
                        std::span<const int64_t> rows, std::span<const int64_t> first, const ExpertWork& work) {
  FailedExperts failed;
  if (experts.empty()) return failed;
  try {
    local.run_part(layer, experts, rows, work);
    return failed;
  } catch (const Error&) {
    // Which ones failed: each again on its own (those read already are in memory; every slot
    // is written again with the same values).
  }
  for (size_t i = 0; i < experts.size(); ++i) {
    try {
      local.request(layer, experts.subspan(i, 1), first.subspan(i, 1));
      local.run_part(layer, experts.subspan(i, 1), rows.subspan(i, 1), work);
    } catch (const Error& e) {
      if (failed.message.empty()) failed.message = e.what();
      failed.experts.push_back(experts[i]);
    }
  }
  return failed;
}

}  // namespace deltafin::hosts
