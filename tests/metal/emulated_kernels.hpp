// The Metal kernels of kernels/metal, compiled as C++ for the SIMT emulator, by name.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "simt.hpp"

namespace deltafin::simt {

// What a dispatch binds: buffer index i at buffers[i] (index 0: the argument struct).
using Buffers = std::array<std::byte*, 16>;
using Kernel = std::function<void(const Buffers& buffers, Group group, uint32_t lid, std::byte* tg)>;

// The kernel named `name` (as in the .metal source); throws when there is none.
const Kernel& emulated_kernel(const std::string& name);
// The names of all of them.
std::vector<std::string> emulated_kernel_names();

}  // namespace deltafin::simt
