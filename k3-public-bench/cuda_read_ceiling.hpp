// The device-memory read ceiling (cuda_read_ceiling.cu): seconds to read `bytes` of device
// memory once, by a kernel that does nothing else; -1 on a CUDA error.
#pragma once

#include <cstdint>

namespace bench {
double read_seconds(const void* device, uint64_t bytes);
}
