// The CUDA entry points of a build without CUDA (DELTAFIN_CUDA off): no device, and a one-line
// refusal for --backend cuda.
#include "backend/backend.hpp"
#include "util/error.hpp"

namespace deltafin {

std::unique_ptr<Backend> make_cuda_backend(int, int) {
  fail("--backend cuda: this build has no CUDA backend (configure with -DDELTAFIN_CUDA=ON)");
}

int cuda_device_count() { return 0; }
bool cuda_device_present() { return false; }

}  // namespace deltafin
