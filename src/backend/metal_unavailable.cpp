// The Metal entry points of a build without Metal (every build but macOS): no device, and a
// one-line refusal for --backend metal and `deltafin metal-selftest`.
#include "backend/backend.hpp"
#include "backend/metal/metal_device.hpp"
#include "util/error.hpp"

namespace deltafin {

std::unique_ptr<Backend> make_metal_backend() {
  fail("--backend metal: this build has no Metal backend (it is built on macOS for Apple Silicon)");
}

bool metal_device_present() { return false; }

namespace metal {

DeviceReport device_report() {
  fail("metal-selftest: this build has no Metal backend (it is built on macOS for Apple Silicon)");
}

}  // namespace metal
}  // namespace deltafin
