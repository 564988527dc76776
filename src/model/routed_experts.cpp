// plan_routed_experts / run_routed_experts (see routed_experts.hpp).
#include "model/routed_experts.hpp"

#include <algorithm>

namespace deltafin {

RoutedPlan plan_routed_experts(ExpertStore& store, int64_t layer, const RouterSpec& router, const float* router_logits,
                               const float* bias, int64_t n, int64_t start, PassStats& stats) {
  const int64_t k = router.top_k;
  std::vector<int32_t> chosen(n * k);
  std::vector<float> weight(n * k);
  for (int64_t t = 0; t < n; ++t)
    route_token(router, router_logits + t * router.experts, bias, chosen.data() + t * k, weight.data() + t * k);
  RoutedPlan plan;
  plan.layer = layer;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) plan.users[chosen[t * k + j]].push_back({t, weight[t * k + j]});
  stats.expert_selections += n * k;
  stats.expert_runs += plan.users.size();
  std::vector<int32_t> ids;
  std::vector<int64_t> first;
  for (const auto& [expert, uses] : plan.users) {
    ids.push_back(expert);
    first.push_back(start + uses.front().first);  // positions are in ascending order
  }
  store.request(layer, ids, first);
  return plan;
}

void run_routed_experts(Backend& backend, ExpertStore& store, const RoutedPlan& plan, const float* x, int64_t n,
                        int64_t in, int64_t width, const GatedActivation& activation, float* out) {
  std::fill(out, out + n * in, 0.0f);
  std::vector<float> xs, gate, up, y;
  for (const auto& [expert, uses] : plan.users) {
    const ExpertHandle w = store.acquire(plan.layer, expert);
    const int64_t m = static_cast<int64_t>(uses.size());
    xs.resize(m * in);
    gate.resize(m * width);
    up.resize(m * width);
    y.resize(m * in);
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + uses[i].first * in, in, xs.data() + i * in);
    backend.matmul(w->proj[kGateProj], xs.data(), m, gate.data());
    backend.matmul(w->proj[kUpProj], xs.data(), m, up.data());
    activation(backend, gate.data(), up.data(), m * width);
    backend.matmul(w->proj[kDownProj], gate.data(), m, y.data());
    for (int64_t i = 0; i < m; ++i) backend.axpy(uses[i].second, y.data() + i * in, out + uses[i].first * in, in);
  }
}

}  // namespace deltafin
