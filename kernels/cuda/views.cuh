// The plain views CUDA kernels take, built by the host code from backend Tensors and Weights:
// a strided fp32 or int32 matrix and a weight matrix in its stored format (cpu/weight_view.hpp),
// all in device-visible memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cpu/weight_view.hpp"

namespace deltafin::cuda {

// [rows, cols], rows `stride` elements apart.
template <class T>
struct Mat {
  T* p = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
  __host__ __device__ T* row(int64_t r) const { return p + r * stride; }
};
using FMat = Mat<float>;
using IMat = Mat<const int32_t>;

// A weight [rows, cols]: data and scales laid out as weight_view.hpp says.
struct WMat {
  WeightFormat format = WeightFormat::F32;
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0, cols = 0;
};

}  // namespace deltafin::cuda
