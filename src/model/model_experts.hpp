// The routed-expert table of any supported checkpoint directory, without loading the model:
// what `deltafin place` and `deltafin verify` need.
#pragma once

#include <string>

#include "weights/expert_table.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// Detects the family from <model_dir>/config.json and locates its experts in `index`.
ExpertTable load_expert_table(const std::string& model_dir, const WeightIndex& index);

}  // namespace deltafin
