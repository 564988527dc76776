// libFuzzer target: routing traces (model/routing_trace.hpp). Any input must either parse into a
// trace whose re-encoded bytes parse back to the same trace, or be refused with deltafin::Error;
// anything else (a crash, a sanitizer report, another exception, a round trip that differs) is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/routing_trace.hpp"
#include "util/error.hpp"

namespace {

bool same(const deltafin::RoutingTrace& a, const deltafin::RoutingTrace& b) {
  if (a.passes.size() != b.passes.size() || a.header.moe_layers != b.header.moe_layers || a.header.label != b.header.label ||
      a.header.experts != b.header.experts || a.header.top_k != b.header.top_k || a.header.slot_bytes != b.header.slot_bytes)
    return false;
  for (size_t i = 0; i < a.passes.size(); ++i) {
    const auto &p = a.passes[i], &q = b.passes[i];
    if (p.kind != q.kind || p.start != q.start || p.n != q.n || p.layers != q.layers || p.rewinds != q.rewinds) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const deltafin::RoutingTrace t = deltafin::parse_routing_trace(bytes, "fuzz");
    const deltafin::RoutingTrace again = deltafin::parse_routing_trace(deltafin::routing_trace_bytes(t), "again");
    if (!same(t, again)) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
