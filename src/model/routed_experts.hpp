// Runs the routed experts of one MoE layer for a pass over n positions, shared by the model
// families: route every position, take the union of the chosen experts, acquire each from the
// expert store once and run it once over all positions that chose it, and sum the weighted
// outputs per position in ascending expert order (so results do not depend on how positions
// are grouped into passes).
#pragma once

#include <cstdint>
#include <functional>

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

// router_logits [n, experts] (fp32), bias [experts] or nullptr; x [n, in] the experts' input;
// out [n, in] = sum over chosen experts of weight * expert(x).
void run_routed_experts(Backend& backend, ExpertStore& store, int64_t layer, const RouterSpec& router,
                        const float* router_logits, const float* bias, const float* x, int64_t n, int64_t in,
                        int64_t width, const GatedActivation& activation, float* out, PassStats& stats);

}  // namespace deltafin
