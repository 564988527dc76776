// Finds non-finite values (NaN, Inf) in a weight matrix as it is stored, without decoding it:
// the exponent bits of f32/f16/bf16 elements, the NaN codes of e4m3 and E8M0, and the fp32/bf16
// scales of the quantized formats. Loading refuses such a tensor in one line naming it (a NaN in
// one weight would otherwise turn every logit into NaN and greedy decoding into token 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cpu/weight_view.hpp"

namespace deltafin {

struct NonFinite {
  bool in_scales = false;  // the scale tensor, not the data
  int64_t index = 0;       // element of that tensor, row-major
};

// The first non-finite element of w's data, then of its scales; nullopt when all are finite.
std::optional<NonFinite> find_non_finite(const WeightView& w);

// Throws Error "tensor '<name>': element [r, c] is NaN or Inf" when find_non_finite finds one,
// naming the weight tensor or, for a scale, the scale tensor.
void require_finite(const WeightView& w, const std::string& weight_name, const std::string& scale_name);

}  // namespace deltafin
