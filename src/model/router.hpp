// The DeepSeek-V3 / Kimi K2 MoE router, in fp32: sigmoid scores; the correction bias is added
// for selection only; optional group-limited selection (n_group / topk_group, a group scored by
// the sum of its two best biased scores); top-k; the unbiased scores of the chosen experts,
// renormalised when norm_topk_prob, times routed_scaling_factor.
#pragma once

#include <cstdint>

#include "weights/model_config.hpp"

namespace deltafin {

// logits [n_routed_experts] (x . gate^T in fp32), bias [n_routed_experts] or nullptr.
// Writes top_k expert ids in ascending order to `experts` and their weights to `weights`.
// Deterministic: equal scores go to the lower index.
void route_token(const ModelConfig& config, const float* logits, const float* bias, int32_t* experts,
                 float* weights);

}  // namespace deltafin
