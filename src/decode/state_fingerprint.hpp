// What a session's saved state depends on besides its tokens (Engine::state_fingerprint; the
// persistent prefix cache keys its entries by it, decode/prefix_cache.hpp):
//   model    the routed experts' tensor names, types and shapes (model_fingerprint), config.json's
//            bytes, and each shard's size with samples of its bytes (its first, middle and last
//            64 KiB: the safetensors header and weights), so a retrained checkpoint of the same
//            shapes is another model without reading every weight;
//   numerics the backend and the kernels it dispatches (name and SIMD target; a device backend's
//            description too), not its thread count: bit-identity holds within one backend;
//   build    deltafin's version and commit (another build may compute other last bits).
#pragma once

#include <string>

#include "backend/backend.hpp"
#include "weights/expert_table.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

std::string state_fingerprint(const WeightIndex& index, const ExpertTable& experts, const Backend& backend);

}  // namespace deltafin
