// Runs the routed experts of one MoE layer for a pass over n positions, shared by the model
// families, in two steps so that expert reads overlap other work (the shared expert):
//   plan_routed_experts: route every position, take the union of the chosen experts (ascending)
//     and start reading the missing ones (ExpertStore::request) — each expert once per pass;
//   run_routed_experts: run each expert once over all positions that chose it, in ascending
//     order, waiting for its read, and sum the weighted outputs per position in that order (so
//     results do not depend on how positions are grouped into passes, or on I/O arrival order).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "io/expert_store.hpp"
#include "model/router.hpp"

namespace deltafin {

struct PassStats {
  uint64_t passes = 0;
  uint64_t positions = 0;
  uint64_t expert_runs = 0;        // (layer, expert) pairs run, each once per pass
  uint64_t expert_selections = 0;  // (position, layer, slot) selections
};

// The gated activation between an expert's gate/up and down projections: gate = act(gate, up).
using GatedActivation = std::function<void(Backend&, float* gate, const float* up, int64_t n)>;

struct RoutedPlan {
  int64_t layer = 0;
  std::map<int32_t, std::vector<std::pair<int64_t, float>>> users;  // expert -> (position, weight)
};

// router_logits [n, experts] (fp32), bias [experts] or nullptr; start: the pass's first position.
RoutedPlan plan_routed_experts(ExpertStore& store, int64_t layer, const RouterSpec& router, const float* router_logits,
                               const float* bias, int64_t n, int64_t start, PassStats& stats);

// x [n, in] the experts' input; out [n, in] = sum over chosen experts of weight * expert(x).
void run_routed_experts(Backend& backend, ExpertStore& store, const RoutedPlan& plan, const float* x, int64_t n,
                        int64_t in, int64_t width, const GatedActivation& activation, float* out);

}  // namespace deltafin
