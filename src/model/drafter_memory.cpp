// A built-in drafter's share of the memory plan (see drafter_memory.hpp).
#include "model/drafter_memory.hpp"

#include <filesystem>
#include <memory>

#include "weights/weight_index.hpp"

namespace deltafin {

DrafterMemory dspark_memory(const DSparkConfig& c) {
  DrafterMemory m;
  m.weights = c.weight_bytes();
  m.state_per_position = c.state_bytes_per_position();
  // fp32: the captured rows [layers * target hidden], the context vector [hidden], kv_a's output.
  m.pass_per_position = 4 * static_cast<uint64_t>(c.target_hidden_size * static_cast<int64_t>(c.target_layer_ids.size()) +
                                                  c.hidden_size + c.kv_width()) + 3 * 256;
  return m;
}

DrafterMemory eagle3_memory(const Eagle3Config& c) {
  const std::unique_ptr<WeightIndex> index = WeightIndex::open(std::filesystem::path(c.path).parent_path().string(), "fc.weight");
  DrafterMemory m;
  m.weights = c.weight_bytes(index->find("lm_head.weight") != nullptr, index->find("embed_tokens.weight") != nullptr);
  m.state_per_position = c.state_bytes_per_position();
  // fp32: the captured rows [aux * target hidden], g and its norm, kv_a's wide input and two
  // outputs, the embedded next tokens, and g kept for drafting.
  m.pass_per_position = 4 * static_cast<uint64_t>(c.target_hidden_size * static_cast<int64_t>(c.target_layers.size()) +
                                                  6 * c.hidden_size + 3 * c.kv_width()) + 3 * 256;
  return m;
}

ModelBytes with_drafter(ModelBytes bytes, const DrafterMemory& drafter) {
  bytes.activations.pass_per_position += drafter.pass_per_position;
  bytes.kv_per_position += drafter.state_per_position;
  return bytes;
}

}  // namespace deltafin
