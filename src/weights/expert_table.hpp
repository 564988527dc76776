// The routed experts of a checkpoint, located and shape-checked once at load: for every MoE
// layer and expert, its three projections (gate, up, down) in their stored formats. The model
// family supplies the tensor names and shapes; the expert store reads through this table.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "weights/weight_index.hpp"

namespace deltafin {

enum ExpertProj : int { kGateProj = 0, kUpProj = 1, kDownProj = 2 };

struct ExpertRef {
  std::array<MatrixRef, 3> proj;  // gate [inter, in], up [inter, in], down [in, inter]
  uint64_t bytes() const { return proj[0].bytes() + proj[1].bytes() + proj[2].bytes(); }
};

class ExpertTable {
 public:
  using IsMoe = std::function<bool(int64_t layer)>;
  using BaseName = std::function<std::string(int64_t layer, int64_t expert, int proj)>;

  // shapes: (rows, cols) of gate, up and down. Throws naming the tensor when one is missing or
  // inconsistent.
  ExpertTable(const WeightIndex& index, int64_t layers, int64_t experts, const IsMoe& is_moe,
              const BaseName& base_name, const std::array<std::pair<int64_t, int64_t>, 3>& shapes);

  const ExpertRef& at(int64_t layer, int64_t expert) const { return by_layer_[layer][expert]; }
  bool has(int64_t layer) const { return !by_layer_[layer].empty(); }
  int64_t layers() const { return static_cast<int64_t>(by_layer_.size()); }
  int64_t experts() const { return experts_; }  // per MoE layer
  // Bytes of every expert of one layer.
  uint64_t layer_bytes(int64_t layer) const;

 private:
  std::vector<std::vector<ExpertRef>> by_layer_;  // [layer][expert]; empty for dense layers
  int64_t experts_ = 0;
};

}  // namespace deltafin
