// ExpertTable (see expert_table.hpp).
#include "weights/expert_table.hpp"

namespace deltafin {

ExpertTable::ExpertTable(const WeightIndex& index, int64_t layers, int64_t experts, const IsMoe& is_moe,
                         const BaseName& base_name, const std::array<std::pair<int64_t, int64_t>, 3>& shapes)
    : by_layer_(layers), experts_(experts) {
  for (int64_t layer = 0; layer < layers; ++layer) {
    if (!is_moe(layer)) continue;
    by_layer_[layer].resize(experts);
    for (int64_t e = 0; e < experts; ++e)
      for (int p = 0; p < 3; ++p)
        by_layer_[layer][e].proj[p] = index.matrix(base_name(layer, e, p), shapes[p].first, shapes[p].second);
  }
}

uint64_t ExpertTable::layer_bytes(int64_t layer) const {
  uint64_t total = 0;
  for (const ExpertRef& e : by_layer_[layer]) total += e.bytes();
  return total;
}

}  // namespace deltafin
