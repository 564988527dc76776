// The Metal backend's op set (src/backend/metal/metal_ops.hpp) on the SIMT emulator: host
// buffers (16 KiB-aligned, as unified memory would be; slots 2 MiB-aligned), every dispatch run at
// once by the emulator, so fences have passed when commit() returns.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace deltafin::test {

std::unique_ptr<Backend> make_emulated_metal_backend();
// Dispatches the emulated backends have run since the process started (for the tests' checks
// that every kernel ran).
const std::map<std::string, int64_t>& emulated_dispatch_counts();

}  // namespace deltafin::test
