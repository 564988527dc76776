// Kimi K3 ops (see k3_ops.hpp): the fp32 versions the engine runs.
#include "cpu/k3_ops.hpp"

#include <cmath>
#include <vector>

#include "cpu/vec_ops.hpp"

namespace deltafin::cpu {

void situ_mul(float* gate, const float* up, int64_t n, float beta, float linear_beta) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float a = beta * std::tanh(g / beta) * (1.0f / (1.0f + std::exp(-g)));
    const float b = linear_beta > 0.0f ? linear_beta * std::tanh(up[i] / linear_beta) : up[i];
    gate[i] = a * b;
  }
}

void short_conv_silu(const float* w, float* window, const float* u, int64_t n, int64_t channels, int64_t taps,
                     float* y) {
  const int64_t hist = taps - 1;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < taps; ++j) {
        const int64_t src = t - hist + j;  // < 0: from the carried window
        const float x = src >= 0 ? u[src * channels + c] : window[(hist + src) * channels + c];
        acc += w[c * taps + j] * x;
      }
      y[t * channels + c] = acc / (1.0f + std::exp(-acc));
    }
  }
  // The new window: the last `hist` inputs, from the old window and u.
  std::vector<float> next(hist * channels);
  for (int64_t i = 0; i < hist; ++i) {
    const int64_t src = n - hist + i;
    for (int64_t c = 0; c < channels; ++c)
      next[i * channels + c] = src >= 0 ? u[src * channels + c] : window[(hist + src) * channels + c];
  }
  std::copy(next.begin(), next.end(), window);
}

void kda_step(float* state, const float* q, const float* k, const float* v, const float* alpha, const float* beta,
              int64_t key_dim, int64_t value_dim, float* o, int64_t head_begin, int64_t head_end) {
  std::vector<float> du(value_dim);
  for (int64_t h = head_begin; h < head_end; ++h) {
    float* s = state + h * key_dim * value_dim;
    const float* kh = k + h * key_dim;
    const float* qh = q + h * key_dim;
    const float* ah = alpha + h * key_dim;
    // Decay, and the prediction S^T k of the decayed state, row by row.
    std::fill(du.begin(), du.end(), 0.0f);
    for (int64_t c = 0; c < key_dim; ++c) {
      float* row = s + c * value_dim;
      for (int64_t j = 0; j < value_dim; ++j) row[j] *= ah[c];
      axpy(kh[c], row, du.data(), value_dim);
    }
    for (int64_t j = 0; j < value_dim; ++j) du[j] = beta[h] * (v[h * value_dim + j] - du[j]);
    float* oh = o + h * value_dim;
    std::fill(oh, oh + value_dim, 0.0f);
    for (int64_t c = 0; c < key_dim; ++c) {
      float* row = s + c * value_dim;
      axpy(kh[c], du.data(), row, value_dim);
      axpy(qh[c], row, oh, value_dim);
    }
  }
}

void attn_res_mix(const float* const* candidates, int64_t m, const float* w, int64_t dim, float eps, float* out) {
  std::vector<float> score(m);
  for (int64_t i = 0; i < m; ++i) {
    const float* v = candidates[i];
    const float inv = 1.0f / std::sqrt(dot(v, v, dim) / static_cast<float>(dim) + eps);
    float s = 0.0f;
    for (int64_t d = 0; d < dim; ++d) s += v[d] * inv * w[d];
    score[i] = s;
  }
  softmax(score.data(), m);
  std::fill(out, out + dim, 0.0f);
  for (int64_t i = 0; i < m; ++i) axpy(score[i], candidates[i], out, dim);
}

// ---- reference twins: double precision, textbook order ----

void situ_mul_ref(float* gate, const float* up, int64_t n, float beta, float linear_beta) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i];
    const double a = beta * std::tanh(g / beta) / (1.0 + std::exp(-g));
    const double b = linear_beta > 0.0f ? linear_beta * std::tanh(u / linear_beta) : u;
    gate[i] = static_cast<float>(a * b);
  }
}

void short_conv_silu_ref(const float* w, float* window, const float* u, int64_t n, int64_t channels,
                         int64_t taps, float* y) {
  const int64_t hist = taps - 1;
  std::vector<double> seq((hist + n) * channels);  // [window ; u]
  for (int64_t i = 0; i < hist * channels; ++i) seq[i] = window[i];
  for (int64_t i = 0; i < n * channels; ++i) seq[hist * channels + i] = u[i];
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < taps; ++j) acc += w[c * taps + j] * seq[(t + j) * channels + c];
      y[t * channels + c] = static_cast<float>(acc / (1.0 + std::exp(-acc)));
    }
  for (int64_t i = 0; i < hist * channels; ++i) window[i] = static_cast<float>(seq[n * channels + i]);
}

void kda_step_ref(float* state, const float* q, const float* k, const float* v, const float* alpha,
                  const float* beta, int64_t key_dim, int64_t value_dim, float* o, int64_t head_begin,
                  int64_t head_end) {
  // S' = (I - beta k k^T) diag(alpha) S + beta k v^T, o = S'^T q, in double.
  for (int64_t h = head_begin; h < head_end; ++h) {
    float* s = state + h * key_dim * value_dim;
    std::vector<double> decayed(key_dim * value_dim), kts(value_dim, 0.0);
    for (int64_t c = 0; c < key_dim; ++c)
      for (int64_t j = 0; j < value_dim; ++j) decayed[c * value_dim + j] = double(alpha[h * key_dim + c]) * s[c * value_dim + j];
    for (int64_t j = 0; j < value_dim; ++j)
      for (int64_t c = 0; c < key_dim; ++c) kts[j] += double(k[h * key_dim + c]) * decayed[c * value_dim + j];
    for (int64_t j = 0; j < value_dim; ++j) {
      double out = 0.0;
      for (int64_t c = 0; c < key_dim; ++c) {
        const double kc = k[h * key_dim + c];
        const double updated = decayed[c * value_dim + j] - beta[h] * kc * kts[j] + beta[h] * kc * v[h * value_dim + j];
        s[c * value_dim + j] = static_cast<float>(updated);
        out += double(q[h * key_dim + c]) * updated;
      }
      o[h * value_dim + j] = static_cast<float>(out);
    }
  }
}

void attn_res_mix_ref(const float* const* candidates, int64_t m, const float* w, int64_t dim, float eps, float* out) {
  std::vector<double> score(m);
  double top = -INFINITY;
  for (int64_t i = 0; i < m; ++i) {
    double sq = 0.0, s = 0.0;
    for (int64_t d = 0; d < dim; ++d) sq += double(candidates[i][d]) * candidates[i][d];
    const double inv = 1.0 / std::sqrt(sq / dim + eps);
    for (int64_t d = 0; d < dim; ++d) s += candidates[i][d] * inv * w[d];
    score[i] = s;
    top = std::max(top, s);
  }
  double sum = 0.0;
  for (double& s : score) sum += s = std::exp(s - top);
  for (int64_t d = 0; d < dim; ++d) {
    double acc = 0.0;
    for (int64_t i = 0; i < m; ++i) acc += score[i] / sum * candidates[i][d];
    out[d] = static_cast<float>(acc);
  }
}

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// x [dim] /= sqrt(sum x^2 + eps), times scale.
void l2_normalise(float* x, int64_t dim, float scale, float eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float inv = scale / std::sqrt(sum + eps);
  for (int64_t i = 0; i < dim; ++i) x[i] *= inv;
}

}  // namespace

void kda_prepare(float* q, float* k, float* beta, float* decay, const float* dt_bias, const float* decay_rate,
                 int64_t heads, int64_t head_dim, float lower_bound, float eps) {
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int64_t h = 0; h < heads; ++h) {
    l2_normalise(q + h * head_dim, head_dim, q_scale, eps);
    l2_normalise(k + h * head_dim, head_dim, 1.0f, eps);
    beta[h] = sigmoid(beta[h]);
    for (int64_t i = 0; i < head_dim; ++i) {
      float& a = decay[h * head_dim + i];
      a = std::exp(lower_bound * sigmoid(decay_rate[h] * (a + dt_bias[h * head_dim + i])));
    }
  }
}

void kda_prepare_ref(float* q, float* k, float* beta, float* decay, const float* dt_bias, const float* decay_rate,
                     int64_t heads, int64_t head_dim, float lower_bound, float eps) {
  auto normalise = [&](float* x, double scale) {
    double sum = 0;
    for (int64_t i = 0; i < head_dim; ++i) sum += double(x[i]) * x[i];
    for (int64_t i = 0; i < head_dim; ++i) x[i] = static_cast<float>(x[i] * scale / std::sqrt(sum + eps));
  };
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  for (int64_t h = 0; h < heads; ++h) {
    normalise(q + h * head_dim, 1.0 / std::sqrt(double(head_dim)));
    normalise(k + h * head_dim, 1.0);
    beta[h] = static_cast<float>(sig(beta[h]));
    for (int64_t i = 0; i < head_dim; ++i) {
      float& a = decay[h * head_dim + i];
      a = static_cast<float>(std::exp(lower_bound * sig(double(decay_rate[h]) * (double(a) + dt_bias[h * head_dim + i]))));
    }
  }
}

}  // namespace deltafin::cpu
