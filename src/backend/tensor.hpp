// Memory a backend owns, and the views ops take.
//   Buffer  bytes the backend allocated (host memory on the CPU, VRAM on CUDA, a shared-storage
//           buffer on Metal) or wrapped (existing host memory, no copy where the device allows).
//           host() is its address when the host may read and write it directly, else nullptr.
//   Tensor  a 2-D view [rows, cols] of fp32 or int32 elements at a byte offset of a buffer, rows
//           `stride` elements apart (a column range of a wider tensor has stride > cols).
//   Weight  a matrix [rows, cols] in its stored format (WeightFormat): data and scales in buffers.
// Views never own memory: the buffer outlives every view of it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/weight_view.hpp"

namespace deltafin {

class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint64_t bytes() const { return bytes_; }
  std::byte* host() const { return host_; }

 protected:
  Buffer(uint64_t bytes, std::byte* host) : bytes_(bytes), host_(host) {}

 private:
  uint64_t bytes_;
  std::byte* host_;
};

enum class Elem : uint8_t { F32, I32 };

struct Tensor {
  Buffer* buffer = nullptr;
  uint64_t offset = 0;  // bytes from the buffer's start to element [0, 0]
  int64_t rows = 0, cols = 0;
  int64_t stride = 0;   // elements from one row to the next (>= cols)
  Elem elem = Elem::F32;

  static Tensor of(Buffer& buffer, int64_t rows, int64_t cols, Elem elem = Elem::F32, uint64_t offset = 0) {
    return {&buffer, offset, rows, cols, cols, elem};
  }
  bool dense() const { return stride == cols; }
  int64_t elements() const { return rows * cols; }
  // Rows [first, first + n).
  Tensor row_range(int64_t first, int64_t n) const {
    Tensor t = *this;
    t.offset += static_cast<uint64_t>(first * stride) * 4;
    t.rows = n;
    return t;
  }
  // Columns [first, first + n) of every row.
  Tensor col_range(int64_t first, int64_t n) const {
    Tensor t = *this;
    t.offset += static_cast<uint64_t>(first) * 4;
    t.cols = n;
    return t;
  }
  // The same elements as [rows, cols] (dense tensors only).
  Tensor reshaped(int64_t new_rows, int64_t new_cols) const {
    Tensor t = *this;
    t.rows = new_rows, t.cols = new_cols, t.stride = new_cols;
    return t;
  }
  // Host addresses (host-visible buffers only; backends check).
  float* f32() const { return reinterpret_cast<float*>(buffer->host() + offset); }
  int32_t* i32() const { return reinterpret_cast<int32_t*>(buffer->host() + offset); }
};

struct Weight {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  Buffer* data = nullptr;
  uint64_t data_offset = 0;
  Buffer* scales = nullptr;  // quantized formats only
  uint64_t scales_offset = 0;

  // The weight as the CPU kernels read it (host-visible buffers only).
  WeightView host_view() const {
    return {format, data->host() + data_offset, rows, cols, scales ? scales->host() + scales_offset : nullptr};
  }
};

}  // namespace deltafin
