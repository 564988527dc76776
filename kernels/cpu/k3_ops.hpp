// Kimi K3's own ops on the CPU, each with a plain reference twin (double precision, textbook
// form): the SiTU-GLU activation, the short causal convolution of Kimi Delta Attention (KDA),
// the KDA delta-rule recurrence, and the Attention-Residuals softmax mix over block snapshots.
// All are deterministic and per-position, so chunked prefill equals token-by-token decoding.
#pragma once

#include <cstdint>

namespace deltafin::cpu {

// gate [n] = [beta tanh(gate/beta) sigmoid(gate)] * [linear_beta tanh(up/linear_beta)]
// (linear_beta 0: the up branch is the identity).
void situ_mul(float* gate, const float* up, int64_t n, float beta, float linear_beta);
void situ_mul_ref(float* gate, const float* up, int64_t n, float beta, float linear_beta);

// Depthwise causal convolution over time, then SiLU, for n new positions:
//   y[t, c] = silu(sum_j w[c, j] * u[t - (K-1) + j, c]),  j = 0..K-1 (tap K-1 = current token)
// where u before the first new position comes from `window` [K-1, C] (oldest first), which is
// updated to the last K-1 inputs. w [C, K], u [n, C], y [n, C].
void short_conv_silu(const float* w, float* window, const float* u, int64_t n, int64_t channels, int64_t taps,
                     float* y);
void short_conv_silu_ref(const float* w, float* window, const float* u, int64_t n, int64_t channels,
                         int64_t taps, float* y);

// One token of the KDA delta rule for heads [head_begin, head_end), per head h with state
// S_h [K, V] (key-major):  S <- diag(alpha_h) S;  S <- S + k_h (beta_h (v_h - S^T k_h))^T;
// o_h = S^T q_h.   q, k [heads, K] (already l2-normalised, q scaled), v, o [heads, V],
// alpha [heads, K] (decay in (0, 1)), beta [heads].
void kda_step(float* state, const float* q, const float* k, const float* v, const float* alpha, const float* beta,
              int64_t key_dim, int64_t value_dim, float* o, int64_t head_begin, int64_t head_end);
void kda_step_ref(float* state, const float* q, const float* k, const float* v, const float* alpha,
                  const float* beta, int64_t key_dim, int64_t value_dim, float* o, int64_t head_begin,
                  int64_t head_end);

// KDA's per-token preparation for heads [0, heads): q_h and k_h [head_dim] l2-normalised
// (x / sqrt(sum x^2 + eps); q also times head_dim^-0.5), beta_h = sigmoid(beta_h), and each decay
// a = exp(lower_bound * sigmoid(decay_rate_h * (a + dt_bias))). In place; q, k, decay [heads * head_dim].
void kda_prepare(float* q, float* k, float* beta, float* decay, const float* dt_bias, const float* decay_rate,
                 int64_t heads, int64_t head_dim, float lower_bound, float eps);
void kda_prepare_ref(float* q, float* k, float* beta, float* decay, const float* dt_bias, const float* decay_rate,
                     int64_t heads, int64_t head_dim, float lower_bound, float eps);

// Attention-Residuals mix of one position: candidates v_0..v_{m-1} [dim] (the live partial sum
// last); s_i = sum_d v_i[d] / sqrt(mean(v_i^2) + eps) * w[d]; out = sum_i softmax(s)_i v_i.
void attn_res_mix(const float* const* candidates, int64_t m, const float* w, int64_t dim, float eps, float* out);
void attn_res_mix_ref(const float* const* candidates, int64_t m, const float* w, int64_t dim, float eps, float* out);

}  // namespace deltafin::cpu
