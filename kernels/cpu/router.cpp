// route_token (see router.hpp).
#include "cpu/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace deltafin::cpu {
namespace {

// Indices of the k largest values of v among `allowed` (ties: lower index first).
std::vector<int32_t> top_k(const std::vector<float>& v, const std::vector<char>& allowed, int64_t k) {
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < static_cast<int32_t>(v.size()); ++i)
    if (allowed[i]) idx.push_back(i);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

}  // namespace

void route_token(const RouterSpec& c, const float* logits, const float* bias, int32_t* experts, float* weights) {
  const int64_t n = c.experts;
  std::vector<float> scores(n), choice(n);
  for (int64_t i = 0; i < n; ++i) {
    scores[i] = 1.0f / (1.0f + std::exp(-logits[i]));
    choice[i] = scores[i] + (bias ? bias[i] : 0.0f);
  }
  std::vector<char> allowed(n, 1);
  if (c.n_group > 1) {
    const int64_t per_group = n / c.n_group;
    std::vector<float> group_score(c.n_group);
    for (int64_t g = 0; g < c.n_group; ++g) {
      std::vector<float> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
      std::partial_sort(members.begin(), members.begin() + 2, members.end(), std::greater<float>());
      group_score[g] = members[0] + members[1];
    }
    const std::vector<int32_t> kept = top_k(group_score, std::vector<char>(c.n_group, 1), c.topk_group);
    std::fill(allowed.begin(), allowed.end(), 0);
    for (int32_t g : kept) std::fill(allowed.begin() + g * per_group, allowed.begin() + (g + 1) * per_group, 1);
  }
  std::vector<int32_t> chosen = top_k(choice, allowed, c.top_k);
  std::sort(chosen.begin(), chosen.end());
  float sum = 0.0f;
  for (int32_t e : chosen) sum += scores[e];
  for (size_t j = 0; j < chosen.size(); ++j) {
    experts[j] = chosen[j];
    weights[j] = c.renormalize ? scores[chosen[j]] / (sum + 1e-20f) * c.scaling : scores[chosen[j]] * c.scaling;
  }
}

}  // namespace deltafin::cpu
