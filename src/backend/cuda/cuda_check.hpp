// CUDA failures as one-line deltafin::Errors: check(status, what) names the call that failed and
// the runtime's message, and clears the runtime's last error so that later calls are not blamed.
#pragma once

#include <cuda_runtime.h>

#include "util/error.hpp"

namespace deltafin::cuda {

inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  fail("CUDA: {} failed: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

}  // namespace deltafin::cuda
