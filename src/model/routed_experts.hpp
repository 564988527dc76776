// The routed experts of one MoE layer for a pass over n positions, shared by the model families,
// in two steps so that expert reads overlap other work (the shared expert):
//   route_and_request: the router's logits and top-k on the backend; the chosen ids come back to
//     the host (the pass's sync point: the expert store must issue the reads), their union
//     (ascending) is requested from the producer, each expert once per pass;
//   run_routed: the slot lists, the producer's expert outputs by slot, and their sum per position
//     in ascending expert order (model/expert_driver.hpp), so results depend neither on how
//     positions are grouped into passes, nor on the order reads arrive, nor on who ran an expert.
// An ExpertProducer is whatever computes the outputs: LocalExperts, the expert store's experts on
// this backend; another host's experts can stand beside it behind the same two calls.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "io/expert_store.hpp"
#include "model/expert_driver.hpp"
#include "model/lookahead.hpp"

namespace deltafin {

struct PassStats {
  uint64_t passes = 0;
  uint64_t positions = 0;
  uint64_t expert_runs = 0;        // (layer, expert) pairs run, each once per pass
  uint64_t expert_selections = 0;  // (position, layer, slot) selections
  double spine_wait_seconds = 0;   // the compute thread waiting for streamed spine units (stream_wait.hpp)
  uint64_t scratch_peak = 0;       // the scratch's high-water mark over the passes (backend/scratch.hpp)
};

// A layer's router: the gate matrix [experts, in] and the optional correction bias [1, experts].
struct RouterWeights {
  const Weight* gate = nullptr;
  Tensor bias;  // buffer nullptr: none
};

struct Routing {
  int64_t layer = 0;
  Tensor ids, weights;          // [n, top_k] on the backend
  std::vector<int32_t> experts;  // the union, ascending
  std::vector<int32_t> chosen;   // the ids [n, top_k] on the host
};

// Produces routed experts' outputs for passes.
class ExpertProducer {
 public:
  virtual ~ExpertProducer() = default;
  // The union a pass needs at `layer` (ascending) and the first position that chose each; what
  // takes time (reads) starts here.
  virtual void request(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> first_positions) = 0;
  // Fills work.y's slots of every expert of `experts` (the union requested, ascending).
  virtual void run(int64_t layer, std::span<const int32_t> experts, const ExpertWork& work) = 0;
};

// The expert store's experts, run on `backend` as their reads land (drive_experts).
class LocalExperts final : public ExpertProducer {
 public:
  LocalExperts(Backend& backend, ExpertStore& store) : backend_(backend), store_(store) {}
  void request(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> first_positions) override;
  void run(int64_t layer, std::span<const int32_t> experts, const ExpertWork& work) override;
  // Part of the union: experts[i] is row rows[i] of work's lists.
  void run_part(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> rows, const ExpertWork& work);
  ExpertStore& store() { return store_; }

 private:
  Backend& backend_;
  ExpertStore& store_;
};

// x [n, in] the router's input; start: the pass's first position. With lookahead active and
// `next` given, layer + 1's router on the same x guesses its experts for prefetch.
// `store` takes the lookahead's guesses.
Routing route_and_request(Backend& backend, Scratch& scratch, ExpertProducer& producer, ExpertStore& store,
                          const RouterSpec& spec,
                          const RouterWeights& router, int64_t layer, const Tensor& x, int64_t start, PassStats& stats,
                          Lookahead& lookahead, const RouterWeights* next);

// out [n, in] = sum over each position's experts of weight * expert(x); x [n, in].
void run_routed(Backend& backend, Scratch& scratch, ExpertProducer& producer, const Routing& routing, const Tensor& x,
                int64_t width, const GatedActivation& act, const Tensor& out);

}  // namespace deltafin
