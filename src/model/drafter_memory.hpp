// What a drafter built into the target's engine (DSpark or an EAGLE-3 head, EngineOptions::
// dspark_dir / eagle3_dir) adds to the one memory budget: its weights for the engine's life, its
// latent cache per position, and per position of a target pass the hidden rows captured for it
// and their projection.
#pragma once

#include <cstdint>

#include "weights/dspark_config.hpp"
#include "weights/eagle3_config.hpp"
#include "weights/model_size.hpp"

namespace deltafin {

struct DrafterMemory {
  uint64_t weights = 0;
  uint64_t state_per_position = 0;
  uint64_t pass_per_position = 0;
};

DrafterMemory dspark_memory(const DSparkConfig& config);
// Its own lm_head and embedding count when its checkpoint (the config's directory) has them.
DrafterMemory eagle3_memory(const Eagle3Config& config);
// The target's bytes with the drafter's latent cache in its state and its per-pass rows in its
// activations.
ModelBytes with_drafter(ModelBytes bytes, const DrafterMemory& drafter);

}  // namespace deltafin
