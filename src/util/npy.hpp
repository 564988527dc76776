// NumPy .npy files (version 1.0, little-endian float32, C order): written by `deltafin logits`,
// read by the golden tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Writes to a temporary name and renames it into place.
// The bytes of a .npy file of float32 [shape] (version 1.0, C order).
std::string npy_f32_bytes(const std::vector<int64_t>& shape, const float* data);
// Writes it through OutputFile (util/atomic_file.hpp).
void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
NpyArray read_npy_f32(const std::string& path);

}  // namespace deltafin
