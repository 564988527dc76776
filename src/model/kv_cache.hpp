// The compressed MLA cache of one token timeline, in backend buffers: per layer that keeps one,
// the normalised latent c [capacity, kv_lora] and the shared key part k_pe [capacity, rope]
// (576 floats a position for Kimi K2). Rewinding is setting the length: positions past it are
// overwritten by the next pass, so the cache is never copied for a rewind. Capacity doubles as
// it grows (new buffers, rows copied on the backend). save_rows/load_rows copy rows [0, n) out
// and back (Session::save_state, model/state_bytes.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "util/error.hpp"

namespace deltafin {

class LatentKvCache {
 public:
  // `held`: the layers that keep a cache (all when empty; K3: the MLA layers only).
  LatentKvCache(Backend& backend, int64_t layers, int64_t kv_lora, int64_t rope, std::vector<bool> held = {})
      : backend_(&backend), kv_lora_(kv_lora), rope_(rope), c_(layers), pe_(layers),
        held_(held.empty() ? std::vector<bool>(layers, true) : std::move(held)) {}

  // Makes room for positions [0, n); running out of memory names the cache and its size.
  void reserve(int64_t n) {
    if (n <= capacity_) return;
    const int64_t capacity = std::max<int64_t>(n, capacity_ * 2);
    try {
      for (size_t l = 0; l < c_.size(); ++l)
        if (held_[l]) grow(c_[l], kv_lora_, capacity), grow(pe_[l], rope_, capacity);
    } catch (const std::bad_alloc&) {
      fail("out of memory growing the KV cache to {} positions ({:.3f} GB)", capacity,
           static_cast<double>(capacity) * position_bytes() / 1e9);
    }
    capacity_ = capacity;
  }

  Tensor c(int64_t layer) const { return Tensor::of(*c_[layer], capacity_, kv_lora_); }    // [capacity, kv_lora]
  Tensor pe(int64_t layer) const { return Tensor::of(*pe_[layer], capacity_, rope_); }     // [capacity, rope]

  // Bytes one position takes over every layer that holds a cache.
  uint64_t position_bytes() const {
    return static_cast<uint64_t>(kv_lora_ + rope_) * sizeof(float) * std::count(held_.begin(), held_.end(), true);
  }
  uint64_t bytes() const { return static_cast<uint64_t>(capacity_) * position_bytes(); }

  // {layers, kv_lora, rope, layers holding a cache}: what saved rows must match.
  std::vector<int64_t> dims() const {
    return {static_cast<int64_t>(c_.size()), kv_lora_, rope_, static_cast<int64_t>(std::count(held_.begin(), held_.end(), true))};
  }
  // Rows [0, n) (n <= capacity) appended to `out`: per held layer c [n, kv_lora], then k_pe [n, rope].
  void save_rows(int64_t n, std::vector<std::byte>& out) const {
    for (size_t l = 0; l < c_.size() && n > 0; ++l) {
      if (!held_[l]) continue;
      for (auto [buffer, cols] : {std::pair{c_[l].get(), kv_lora_}, std::pair{pe_[l].get(), rope_}}) {
        const size_t at = out.size();
        out.resize(at + static_cast<size_t>(n * cols) * 4);
        backend_->download(Tensor::of(*buffer, capacity_, cols).row_range(0, n), out.data() + at);
      }
    }
  }
  // Rows [0, n) from `rows` (n * position_bytes() bytes in save_rows' order), room made first.
  void load_rows(int64_t n, const std::byte* rows) {
    reserve(n);
    for (size_t l = 0; l < c_.size() && n > 0; ++l) {
      if (!held_[l]) continue;
      for (auto [buffer, cols] : {std::pair{c_[l].get(), kv_lora_}, std::pair{pe_[l].get(), rope_}}) {
        const uint64_t bytes = static_cast<uint64_t>(n * cols) * 4;
        backend_->upload(rows, *buffer, 0, bytes);
        rows += bytes;
      }
    }
  }

 private:
  void grow(std::unique_ptr<Buffer>& buffer, int64_t cols, int64_t capacity) {
    std::unique_ptr<Buffer> bigger = backend_->allocate(static_cast<uint64_t>(capacity * cols) * 4);
    if (buffer && capacity_ > 0 && cols > 0)
      backend_->copy(Tensor::of(*buffer, capacity_, cols), Tensor::of(*bigger, capacity_, cols));
    buffer = std::move(bigger);
  }

  Backend* backend_;
  int64_t kv_lora_, rope_, capacity_ = 0;
  std::vector<std::unique_ptr<Buffer>> c_, pe_;  // [layer]
  std::vector<bool> held_;                       // [layer]
};

}  // namespace deltafin
