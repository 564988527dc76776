// One timed greedy generation through the speculative decoder on a fresh engine (cold caches),
// for the speculative benchmarks (spec_storage_bench, spec_cost_bench): the ids, the decode's
// seconds (prefill excluded), the engine's counters around it and the decoder's statistics.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"

namespace deltafin::bench {

struct SpecRun {
  std::vector<int32_t> ids;  // the `tokens` generated after the prompt
  double seconds = 0;
  EngineStats before, after;
  SpeculativeStats spec;
};

inline SpecRun timed_generation(const EngineOptions& o, const std::vector<int32_t>& prompt, int tokens, Drafter* drafter,
                                const SpeculativeOptions& so) {
  auto engine = Engine::open(o);
  auto session = engine->new_session();
  Sampler sampler(SamplerOptions{});
  SpecRun r;
  std::vector<int32_t> context = prompt;
  context.push_back(sampler.sample(session->append(prompt, false)));
  SpeculativeDecoder decoder(*session, drafter, sampler, engine->summary().vocab_size, so);
  r.before = engine->stats();
  const auto t0 = std::chrono::steady_clock::now();
  while (static_cast<int>(context.size() - prompt.size()) < tokens)
    for (int32_t t : decoder.step(context)) context.push_back(t);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.after = engine->stats();
  r.spec = decoder.stats();
  r.ids.assign(context.begin() + static_cast<std::ptrdiff_t>(prompt.size()), context.end());
  r.ids.resize(static_cast<size_t>(tokens));
  return r;
}

}  // namespace deltafin::bench
