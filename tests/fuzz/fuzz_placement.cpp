// libFuzzer target: placement manifest parsing. Any input must either parse into a manifest
// whose invariants hold (sorted records, holders of expert and spine records on listed drives at
// aligned offsets; version 4's drive hosts one per drive, numbered 0..H-1 without gaps, and each
// host's share holding exactly the holders on its drives) or be refused with deltafin::Error;
// anything else is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
    const int hosts = m.hosts();
    if (hosts < 1 || (!m.drive_hosts.empty() && m.drive_hosts.size() != m.drives.size())) __builtin_trap();
    size_t holders = 0, spine_holders = 0, shared = 0, spine_shared = 0, drives = 0;
    for (const auto& r : m.records) holders += r.holders.size();
    for (const auto& r : m.spine) spine_holders += r.holders.size();
    for (int host = 0; host < hosts; ++host) {
      const deltafin::PlacementManifest share = deltafin::host_share(m, host);
      if (share.drives.empty() || share.hosts() != 1) __builtin_trap();  // every host has a drive
      drives += share.drives.size();
      for (const deltafin::PlacedRecord& r : share.records) {
        const deltafin::PlacedRecord* whole = m.find(r.layer, r.expert);
        if (!whole || r.holders.empty()) __builtin_trap();
        const std::vector<int> on = deltafin::record_hosts(m, *whole);
        if (std::find(on.begin(), on.end(), host) == on.end()) __builtin_trap();
        if (on.front() != m.drive_host(whole->holders.front().drive)) __builtin_trap();
        for (const auto& h : r.holders)
          if (h.drive < 0 || static_cast<size_t>(h.drive) >= share.drives.size()) __builtin_trap();
        shared += r.holders.size();
      }
      for (const deltafin::PlacedSpineRecord& r : share.spine) spine_shared += r.holders.size();
    }
    if (drives != m.drives.size() || shared != holders || spine_shared != spine_holders) __builtin_trap();
    // Printing and parsing again gives the same manifest.
    const deltafin::PlacementManifest again = deltafin::parse_placement(deltafin::placement_json(m), "fuzz/again.json");
    if (again.records.size() != m.records.size() || again.drives != m.drives || again.spine.size() != m.spine.size() ||
        again.drive_hosts != m.drive_hosts)
      __builtin_trap();
    for (size_t i = 0; i < m.spine.size(); ++i)
      if (again.spine[i].tensor != m.spine[i].tensor || again.spine[i].xxh3 != m.spine[i].xxh3) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
