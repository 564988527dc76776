// Numbers for the receipt in units that fit their size: durations ("52 ms", "1.24 s", "3 min 5 s"),
// rates ("366 tok/s", "4.1 tok/s", "0.0368 tok/s") and byte rates ("450 MB/s"); byte counts come
// from util/human_bytes.hpp. Also the engine-counter half of the receipt (--stats=full).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cli/commands.hpp"
#include "util/human_bytes.hpp"

namespace deltafin::cli {

inline std::string human_seconds(double s) {
  if (s < 1) return fmt::format("{:.0f} ms", s * 1e3);
  if (s < 100) return fmt::format("{:.2f} s", s);
  if (s < 3600) {
    const int64_t whole = std::llround(s);  // rounded once, so 119.7 s reads "2 min 0 s", not "1 min 60 s"
    return fmt::format("{} min {} s", whole / 60, whole % 60);
  }
  return fmt::format("{:.1f} h", s / 3600);
}

// Three significant digits at least, no more decimals than that needs.
inline std::string human_amount(double v) {
  if (v >= 100) return fmt::format("{:.0f}", v);
  if (v >= 10) return fmt::format("{:.1f}", v);
  if (v >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3g}", v);
}

inline std::string human_byte_rate(double bytes_per_second) {
  return human_bytes(static_cast<uint64_t>(std::llround(bytes_per_second))) + "/s";
}

// The engine's counters under the user's lines (--stats=full), to stderr.
void print_engine_counters(const Engine& engine, const RunReport& report);

// A run on several hosts: a line per host (cli/receipt_hosts.cpp), and the JSON array's items
// (`before`: the counters at the decode's start, for the decode's own figures).
void print_hosts(const EngineStats& stats);
std::string hosts_json(const EngineStats& stats, const EngineStats& before);

}  // namespace deltafin::cli
