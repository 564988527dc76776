// The Metal backend's entry points besides make_metal_backend() (backend.hpp): what
// `deltafin metal-selftest` reports about the device. Defined by metal_backend.mm on Apple
// builds; elsewhere by metal_unavailable.cpp, where each throws a one-line deltafin::Error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace deltafin::metal {

struct DeviceReport {
  std::string name;
  uint64_t max_buffer_length = 0;
  uint64_t recommended_working_set = 0;
  bool unified_memory = false;
  uint64_t max_threadgroup_memory = 0;
  std::string language_version;  // the pinned MSL version the shaders were compiled for
  std::vector<std::pair<std::string, std::string>> pipelines;  // kernel, compile log ("" when clean)
  bool no_copy_wrap = false;     // a 16 KiB-aligned host buffer wrapped without a copy, written by a kernel
  std::string no_copy_detail;
  double expert_gbps = 0;        // the routed-experts op on K3 shapes, weight bytes read per second
  double copy_gbps = 0;          // df_copy in the same run, bytes read + written per second
};

// Opens the default device, compiles every pipeline and measures; throws when there is none.
DeviceReport device_report();

}  // namespace deltafin::metal
