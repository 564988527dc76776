// The compressed MLA cache of one token timeline: per layer and position, the normalised
// latent c [kv_lora] and the rotated shared key k_pe [rope] (576 floats a position for Kimi K2).
// Rewinding is setting the length: positions past it are overwritten by the next pass. Capacity
// doubles as it grows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "util/error.hpp"

namespace deltafin {

class LatentKvCache {
 public:
  // `held`: the layers that keep a cache (all when empty; K3: the MLA layers only).
  LatentKvCache(int64_t layers, int64_t kv_lora, int64_t rope, std::vector<bool> held = {})
      : kv_lora_(kv_lora), rope_(rope), c_(layers), pe_(layers), held_(held.empty() ? std::vector<bool>(layers, true) : held) {}

  // Bytes one position takes over every layer that holds a cache.
  uint64_t position_bytes() const {
    return static_cast<uint64_t>(kv_lora_ + rope_) * sizeof(float) * std::count(held_.begin(), held_.end(), true);
  }

  // Makes room for positions [0, n); running out of memory names the cache and its size.
  void reserve(int64_t n) {
    if (n <= capacity_) return;
    const int64_t capacity = std::max<int64_t>(n, capacity_ * 2);
    try {
      for (size_t l = 0; l < c_.size(); ++l)
        if (held_[l]) c_[l].resize(capacity * kv_lora_), pe_[l].resize(capacity * rope_);
    } catch (const std::bad_alloc&) {
      fail("out of memory growing the KV cache to {} positions ({:.3f} GB)", capacity,
           static_cast<double>(capacity) * position_bytes() / 1e9);
    }
    capacity_ = capacity;
  }

  float* c(int64_t layer, int64_t pos) { return c_[layer].data() + pos * kv_lora_; }
  float* pe(int64_t layer, int64_t pos) { return pe_[layer].data() + pos * rope_; }
  uint64_t bytes() const { return static_cast<uint64_t>(capacity_) * position_bytes(); }

 private:
  int64_t kv_lora_, rope_, capacity_ = 0;
  std::vector<std::vector<float>> c_;   // [layer][pos * kv_lora]
  std::vector<std::vector<float>> pe_;  // [layer][pos * rope]
  std::vector<bool> held_;              // [layer]
};

}  // namespace deltafin
