// The memory one forward pass over n positions takes for its activations, from config.json alone
// (the memory plan sizes prefill passes with it, decode/memory_plan.hpp). The model's scratch
// (backend/scratch.hpp) holds the pass-long tensors (hidden states; K3's residual blocks) and,
// one at a time, a layer's frame (attention q/ckv/attn or K3's KDA tensors, the router logits and
// choices, the shared MLP, the expert op's lists, hidden [n*k, width] and y [n*k, in]) or the
// head's logits (the last row, or every row when all logits are kept: `deltafin logits`, verify passes); the backend adds temporaries of its own outside the scratch (CPU: the
// expert op's gathered rows and KDA's convolved inputs; CUDA: KDA's convolution, 3*n*ch floats).
// tests/test_pass_activations.cpp ties the formula to the scratch's high-water mark.
#pragma once

#include <algorithm>
#include <cstdint>

namespace deltafin {

struct ModelConfig;
struct K3Config;

struct PassActivations {
  uint64_t pass_per_position = 0;       // tensors that live for the whole pass
  uint64_t layer_per_position = 0;      // the largest layer frame's tensors
  uint64_t layer_fixed = 0;             // the frame's tensors that do not grow with n (the union's ids and counts)
  uint64_t logits_row = 0;              // the head's frame: one position's logits
  uint64_t alignment = 0;               // at most 255 bytes per tensor taken (tensors are 256-byte aligned)
  uint64_t workspace_per_position = 0;  // the backend's temporaries outside the scratch (the most any backend takes)

  // The scratch's high-water mark for a pass of n positions (all_logits: every row's logits kept).
  uint64_t scratch_bytes(int64_t n, bool all_logits = false) const {
    const uint64_t m = static_cast<uint64_t>(std::max<int64_t>(n, 0));
    return pass_per_position * m + std::max(layer_per_position * m + layer_fixed, logits_row * (all_logits ? m : 1)) + alignment;
  }
  // Everything a pass of n positions takes: the scratch and the backend's temporaries.
  uint64_t bytes(int64_t n, bool all_logits = false) const {
    return scratch_bytes(n, all_logits) + workspace_per_position * static_cast<uint64_t>(std::max<int64_t>(n, 0));
  }
  // The most positions (1 .. most) whose pass takes at most `room` (at least 1).
  int64_t positions_within(uint64_t room, int64_t most, bool all_logits = false) const {
    int64_t lo = 1, hi = std::max<int64_t>(most, 1);
    while (lo < hi) {  // bytes(n) grows with n
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (bytes(mid, all_logits) <= room) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
  // What one more position adds.
  uint64_t per_position() const { return pass_per_position + layer_per_position + workspace_per_position; }
};

PassActivations k2_pass_activations(const ModelConfig& c);
PassActivations k3_pass_activations(const K3Config& c);

}  // namespace deltafin
