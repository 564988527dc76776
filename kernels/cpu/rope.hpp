// Interleaved rotary position embedding of one vector (the checkpoint's layout): pair i is
// (x[2i], x[2i+1]), turned by pos * inv_freq[i]; cos and sin are taken in double from the fp32
// angle (as transformers computes them in fp32 and rounds), then scaled by attention_factor.
#pragma once

#include <cstdint>

namespace deltafin::cpu {

// x [2 * half] in place.
void rope_interleaved(float* x, const float* inv_freq, int64_t half, float attention_factor, int64_t pos);
void rope_interleaved_ref(float* x, const float* inv_freq, int64_t half, float attention_factor, int64_t pos);

}  // namespace deltafin::cpu
