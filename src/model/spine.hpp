// Resident ("spine") weights: everything but the routed experts, read once at load in their
// stored formats. Norm weights and the router's correction bias are widened to fp32 vectors.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/weight_view.hpp"
#include "io/aligned_buffer.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

struct SpineMatrix {
  AlignedBuffer data;
  AlignedBuffer scales;
  WeightView view;
  uint64_t bytes() const { return data.size() + scales.size(); }
};

// Reads `name` [rows, cols]; throws (naming file and tensor) when absent or inconsistent.
SpineMatrix load_spine_matrix(const WeightIndex& index, const std::string& name, int64_t rows, int64_t cols);

// Reads a float vector of n elements and widens it to fp32.
std::vector<float> load_spine_vector(const WeightIndex& index, const std::string& name, int64_t n);
// Reads a float tensor whose shape is one of `shapes` and widens all its elements to fp32.
std::vector<float> load_spine_floats(const WeightIndex& index, const std::string& name,
                                     const std::vector<std::vector<int64_t>>& shapes);

}  // namespace deltafin
