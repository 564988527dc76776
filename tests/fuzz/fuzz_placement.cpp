// libFuzzer target: placement manifest parsing. Any input must either parse into a manifest
// whose invariants hold (sorted records, holders of expert and spine records on listed drives at
// aligned offsets) or be refused with deltafin::Error; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/error.hpp"
#include "weights/placement.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  try {
    const deltafin::PlacementManifest m = deltafin::parse_placement(json, "fuzz/placement.json");
    for (size_t i = 0; i < m.records.size(); ++i) {
      const deltafin::PlacedRecord& r = m.records[i];
      if (r.holders.empty() || r.payload == 0) __builtin_trap();
      if (i > 0 && std::pair{m.records[i - 1].layer, m.records[i - 1].expert} >= std::pair{r.layer, r.expert}) __builtin_trap();
      for (const auto& h : r.holders)
        if (h.drive < 0 || static_cast<size_t>(h.drive) >= m.drives.size() || h.offset % m.alignment) __builtin_trap();
      if (m.find(r.layer, r.expert) != &r) __builtin_trap();
    }
    for (const deltafin::PlacedSpineRecord& r : m.spine) {
      if (r.holders.empty() || r.payload == 0 || r.tensor.empty()) __builtin_trap();
      for (const auto& h : r.holders)
        if (h.drive < 0 || static_cast<size_t>(h.drive) >= m.drives.size() || h.offset % m.alignment) __builtin_trap();
    }
    // Printing and parsing again gives the same manifest.
    const deltafin::PlacementManifest again = deltafin::parse_placement(deltafin::placement_json(m), "fuzz/again.json");
    if (again.records.size() != m.records.size() || again.drives != m.drives || again.spine.size() != m.spine.size())
      __builtin_trap();
    for (size_t i = 0; i < m.spine.size(); ++i)
      if (again.spine[i].tensor != m.spine[i].tensor || again.spine[i].xxh3 != m.spine[i].xxh3) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
