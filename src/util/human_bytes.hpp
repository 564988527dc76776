// Byte counts for people: "12.3 KB", "17.5 MB", "1.20 GB" (decimal units).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace deltafin {

inline std::string human_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} KB", b / 1e3);
  return fmt::format("{} B", bytes);
}

}  // namespace deltafin
