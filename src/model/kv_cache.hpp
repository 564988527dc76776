// The compressed MLA cache of one token timeline: per layer and position, the normalised
// latent c [kv_lora] and the rotated shared key k_pe [rope] (576 floats a position for Kimi K2).
// Rewinding is setting the length: positions past it are overwritten by the next pass.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace deltafin {

class LatentKvCache {
 public:
  LatentKvCache(int64_t layers, int64_t kv_lora, int64_t rope) : kv_lora_(kv_lora), rope_(rope), c_(layers), pe_(layers) {}

  // Makes room for positions [0, n).
  void reserve(int64_t n) {
    if (n <= capacity_) return;
    capacity_ = std::max<int64_t>(n, capacity_ * 2);
    for (auto& v : c_) v.resize(capacity_ * kv_lora_);
    for (auto& v : pe_) v.resize(capacity_ * rope_);
  }

  float* c(int64_t layer, int64_t pos) { return c_[layer].data() + pos * kv_lora_; }
  float* pe(int64_t layer, int64_t pos) { return pe_[layer].data() + pos * rope_; }
  uint64_t bytes() const { return static_cast<uint64_t>(capacity_) * (kv_lora_ + rope_) * 4 * c_.size(); }

 private:
  int64_t kv_lora_, rope_, capacity_ = 0;
  std::vector<std::vector<float>> c_;   // [layer][pos * kv_lora]
  std::vector<std::vector<float>> pe_;  // [layer][pos * rope]
};

}  // namespace deltafin
