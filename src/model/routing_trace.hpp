// Routing traces (docs/routing-traces.md): every routed-expert choice of a run, per pass, per
// position and per MoE layer, in a compact binary format.
//   RoutingRecorder: what the model and the session write into as a run goes (kept in memory;
//     `run --record-routing FILE` writes it out at the end).
//   read_routing_trace: the strict reader (the cache simulator, the tests); a malformed file throws
//     Error naming the file and the byte offset.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

namespace deltafin {

struct RoutingTraceHeader {
  std::string model;
  int64_t layers = 0;
  std::vector<int64_t> moe_layers;  // ascending
  int64_t experts = 0, top_k = 0;
  uint64_t record_bytes = 0;        // one expert record's payload (what a read costs)
  uint64_t slot_bytes = 0;          // one expert's memory in the store
  std::string source = "recorded";  // or "synthetic": a model of routing, never a measurement
  std::string label;
};

// One forward pass: positions start..start+n-1, and per MoE layer (header order) the chosen ids
// [n, top_k], position-major. rewind >= 0: after this pass, positions >= rewind were dropped.
struct RoutingPass {
  PassKind kind = PassKind::Prefill;
  int64_t start = 0, n = 0;
  std::vector<std::vector<uint16_t>> layers;  // one per header.moe_layers entry
  std::vector<int64_t> rewinds;               // rewinds that followed this pass, in order
};

struct RoutingTrace {
  RoutingTraceHeader header;
  std::vector<RoutingPass> passes;
};

class RoutingRecorder {
 public:
  explicit RoutingRecorder(RoutingTraceHeader header);
  void set_kind(PassKind kind) { kind_ = kind; }  // of the passes that follow
  void pass(int64_t start, int64_t n);
  void layer(int64_t layer, std::span<const int32_t> chosen);  // [n, top_k] of the current pass
  void rewind(int64_t position);
  std::string bytes() const;  // the whole file, ended

 private:
  RoutingTraceHeader header_;
  std::string events_;
  PassKind kind_ = PassKind::Prefill;
};

RoutingTrace read_routing_trace(const std::string& path);
// A trace's file bytes (synthetic traces, tests; parse_routing_trace reads them back).
std::string routing_trace_bytes(const RoutingTrace& trace);
RoutingTrace parse_routing_trace(std::string_view bytes, const std::string& name);

}  // namespace deltafin
