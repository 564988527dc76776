// The sigmoid MoE router of DeepSeek-V3, the Kimi K2 family and Kimi K3, in fp32: sigmoid
// scores; the correction bias is added for selection only; optional group-limited selection
// (n_group / topk_group, a group scored by the sum of its two best biased scores); top-k; the
// unbiased scores of the chosen experts, renormalised when asked, times routed_scaling_factor.
#pragma once

#include <cstdint>

#include "op_params.hpp"

namespace deltafin::cpu {

// logits [experts] (x . gate^T in fp32), bias [experts] or nullptr.
// Writes top_k expert ids in ascending order to `chosen` and their weights to `weights`.
// Deterministic: equal scores go to the lower index.
void route_token(const RouterSpec& spec, const float* logits, const float* bias, int32_t* chosen, float* weights);

}  // namespace deltafin::cpu
