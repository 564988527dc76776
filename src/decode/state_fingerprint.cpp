// The saved state's fingerprint (see state_fingerprint.hpp).
#include "decode/state_fingerprint.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "cpu/simd_target.hpp"
#include "hosts/handshake.hpp"
#include "util/input_file.hpp"
#include "weights/placement.hpp"

namespace deltafin {

std::string state_fingerprint(const WeightIndex& index, const ExpertTable& experts, const Backend& backend) {
  constexpr uint64_t kSample = 64 << 10;
  XXH3_state_t* sum = XXH3_createState();
  XXH3_64bits_reset(sum);
  const std::string config = read_input_file((std::filesystem::path(index.dir()) / "config.json").string(), "config.json");
  XXH3_64bits_update(sum, config.data(), config.size());
  std::vector<char> sample(kSample);
  for (int s = 0; s < index.shard_count(); ++s) {
    const ReadOnlyFile& file = index.shard_file(s);
    const uint64_t size = file.size(), n = std::min(size, kSample);
    XXH3_64bits_update(sum, &size, sizeof(size));
    for (const uint64_t at : {uint64_t{0}, (size - n) / 2, size - n}) {
      file.read_exact(sample.data(), n, at);
      XXH3_64bits_update(sum, sample.data(), n);
    }
  }
  const uint64_t weights = XXH3_64bits_digest(sum);
  XXH3_freeState(sum);
  std::string numerics = fmt::format("{} {}", backend.name(), cpu::simd_current());
  if (std::string(backend.name()) != "cpu") numerics.append(" ").append(backend.describe());
  return fmt::format("model {} weights {:016x} backend {} build {}", model_fingerprint(experts), weights, numerics,
                     hosts::build_version());
}

}  // namespace deltafin
