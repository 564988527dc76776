// The in-memory and on-drive layout of one routed expert: its three projections (gate, up,
// down), each a weight tensor and optionally a scale tensor, back to back at 64-byte aligned
// offsets. A placed record on a drive has exactly this layout, so one read of the record fills
// the expert's buffer; the original shards are read tensor by tensor into the same offsets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "cpu/weight_view.hpp"
#include "weights/expert_table.hpp"

namespace deltafin {

struct RecordLayout {
  // Byte offset and size of part 2*p (weight of projection p) and 2*p+1 (its scale; size 0 if none).
  std::array<uint64_t, 6> offset{};
  std::array<uint64_t, 6> nbytes{};
  uint64_t payload = 0;  // bytes up to the end of the last part
};

RecordLayout record_layout(const ExpertRef& expert);

// Weight views of the three projections over a buffer that holds the record.
std::array<WeightView, 3> record_views(const ExpertRef& expert, const RecordLayout& layout, const std::byte* record);

// The tensor (weight or scale) behind part i of the layout.
const TensorRef& record_part_tensor(const ExpertRef& expert, int part);

constexpr uint64_t round_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace deltafin
