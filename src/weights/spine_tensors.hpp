// The spine tensors `deltafin place` gives records of their own: every tensor of the checkpoint
// under its root prefix with two or more dimensions (a matrix's weights, or its scales) that is
// not a routed expert's and not in a layer past the config's (a multi-token-prediction layer the
// model never runs). They are the tensors the streamed spine reads (io/spine_stream.hpp); a few
// small 2-D parameters the model keeps resident get a record too, and a streamed tensor without
// a record is read from its shard.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "weights/expert_table.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// In checkpoint order (shard, then offset).
std::vector<TensorRef> placeable_spine_tensors(const WeightIndex& index, const ExpertTable& experts);

// Every tensor of the checkpoint by its full name (no lookup is counted as a use).
std::unordered_map<std::string, TensorRef> tensors_by_name(const WeightIndex& index);

}  // namespace deltafin
