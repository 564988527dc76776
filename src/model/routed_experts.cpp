// LocalExperts, route_and_request and run_routed (see routed_experts.hpp).
#include "model/routed_experts.hpp"

#include <algorithm>

namespace deltafin {
namespace {

// The chosen ids [n, k] on the host.
std::vector<int32_t> download_ids(Backend& backend, const Tensor& ids) {
  std::vector<int32_t> host(ids.rows * ids.cols);
  backend.download(ids, host.data());
  return host;
}

// Experts of the store as the backend's ops take them: weights in the slot pool's buffer where
// the read landed, pinned (the store's handle) until the backend lets go of the pin.
class StoreSource final : public ExpertSource {
 public:
  StoreSource(ExpertStore& store, int64_t layer) : store_(store), layer_(layer) {}

  Resident acquire(int32_t expert) override { return resident(store_.acquire(layer_, expert)); }
  size_t acquire_next(std::span<const int32_t> pending, Resident& out, bool wait) override {
    auto [index, handle] = store_.acquire_next(layer_, pending, wait);
    if (handle) out = resident(std::move(handle));
    return index;
  }
  int64_t capacity() const override { return store_.slot_count(); }

 private:
  Resident resident(ExpertHandle handle) {
    Buffer& pool = store_.pool_buffer();
    const auto offset = [&](const void* at) {
      return handle->offset + static_cast<uint64_t>(static_cast<const std::byte*>(at) - handle->record);
    };
    Resident r;
    for (int p = 0; p < 3; ++p) {
      const WeightView& v = handle->proj[p];
      r.proj[p] = {v.format, v.rows, v.cols, &pool, offset(v.data), v.scales ? &pool : nullptr, v.scales ? offset(v.scales) : 0};
    }
    r.pin = std::move(handle);
    return r;
  }

  ExpertStore& store_;
  int64_t layer_;
};

}  // namespace

void LocalExperts::request(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> first_positions) {
  store_.request(layer, experts, first_positions);
}

void LocalExperts::run(int64_t layer, std::span<const int32_t> experts, const ExpertWork& work) {
  StoreSource source(store_, layer);
  drive_experts(backend_, source, experts, work);
}

void LocalExperts::run_part(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> rows,
                            const ExpertWork& work) {
  StoreSource source(store_, layer);
  drive_experts(backend_, source, experts, work, rows);
}

Routing route_and_request(Backend& backend, Scratch& scratch, ExpertProducer& producer, ExpertStore& store,
                          const RouterSpec& spec,
                          const RouterWeights& router, int64_t layer, const Tensor& x, int64_t start, PassStats& stats,
                          Lookahead& lookahead, const RouterWeights* next) {
  const int64_t n = x.rows, k = spec.top_k;
  const Tensor logits = scratch.take(n, spec.experts);  // [n, experts] fp32
  Routing r;
  r.layer = layer;
  r.ids = scratch.take(n, k, Elem::I32);
  r.weights = scratch.take(n, k);
  backend.matmul(*router.gate, x, logits);
  backend.route(spec, logits, router.bias, r.ids, r.weights);
  r.chosen = download_ids(backend, r.ids);  // the sync point
  const std::vector<int32_t>& chosen = r.chosen;
  r.experts = chosen;
  std::sort(r.experts.begin(), r.experts.end());
  r.experts.erase(std::unique(r.experts.begin(), r.experts.end()), r.experts.end());
  std::vector<int64_t> first(r.experts.size(), -1);  // the first position that chose each expert
  for (int64_t i = 0; i < n * k; ++i) {
    const size_t e = std::lower_bound(r.experts.begin(), r.experts.end(), chosen[i]) - r.experts.begin();
    if (first[e] < 0) first[e] = start + i / k;
  }
  stats.expert_selections += n * k;
  stats.expert_runs += r.experts.size();
  producer.request(layer, r.experts, first);
  if (next && lookahead.active()) {
    const Tensor ids = scratch.take(n, k, Elem::I32), weights = scratch.take(n, k);
    backend.matmul(*next->gate, x, logits);
    backend.route(spec, logits, next->bias, ids, weights);
    std::vector<float> guessed(n * k);
    backend.download(weights, guessed.data());
    lookahead.guess(store, layer + 1, download_ids(backend, ids), guessed);
  }
  return r;
}

void run_routed(Backend& backend, Scratch& scratch, ExpertProducer& producer, const Routing& routing, const Tensor& x,
                int64_t width, const GatedActivation& act, const Tensor& out) {
  const Scratch::Mark frame = scratch.mark();
  const ExpertWork work = prepare_experts(backend, scratch, x, routing.ids, routing.experts, width, act);
  producer.run(routing.layer, routing.experts, work);
  backend.expert_combine(routing.ids, routing.weights, work.y, out);
  scratch.release(frame);
}

}  // namespace deltafin
