// Safetensors shard headers: an 8-byte little-endian length N, N bytes of JSON, then the data.
// parse_safetensors_header() validates everything a reader relies on (dtype names, shapes,
// offsets inside the data region and not overlapping, byte counts that match dtype x shape)
// and names the file and tensor in every error. It never reads tensor data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weights/dtype.hpp"

namespace deltafin {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;   // absolute byte offset in the file (8 + N + data_offsets[0])
  uint64_t nbytes = 0;   // data_offsets[1] - data_offsets[0]

  int64_t numel() const;
};

struct SafetensorsHeader {
  std::string path;
  uint64_t file_size = 0;
  uint64_t data_start = 0;            // 8 + N
  std::vector<TensorInfo> tensors;    // in header order
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__" string pairs
};

// Parses the JSON header text (the N bytes after the length prefix) of a file of `file_size`
// bytes named `path` (used in messages). Throws deltafin::Error on any inconsistency.
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t file_size,
                                           const std::string& path);

// Opens `path` read-only, reads and validates the length prefix and the header.
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace deltafin
