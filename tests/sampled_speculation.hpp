// End to end check that sampled speculative decoding keeps the target's distribution: from one
// state (prompt held, `pending` next), the first token of a speculative step is drawn `draws`
// times (the session rewound after each) and counted against the target's exact distribution of
// the token after `pending`. Shared by the draft-model and DSpark cases.
#pragma once

#include <cstdint>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "test_util.hpp"

namespace deltafin::test {

struct SampledSpeculation {
  double chi_square = 0, limit = 0;  // Pearson's statistic and its 0.1 % point
  int support = 0;                   // tokens the target gives mass to
  SpeculativeStats stats;
};

inline SampledSpeculation sample_first_tokens(Engine& target, Drafter& drafter, const SamplerOptions& sampling,
                                              const std::vector<int32_t>& prompt, int32_t pending, int k, uint64_t draws) {
  Sampler sampler(sampling);
  auto session = target.new_session();
  const int64_t vocab = target.summary().vocab_size;
  session->append(prompt, false);
  const int64_t start = session->position();
  const std::vector<double> p = sampler.distribution(session->append(std::vector<int32_t>{pending}, false));
  session->rewind(start);
  std::vector<int32_t> context = prompt;
  context.push_back(pending);
  SpeculativeDecoder decoder(*session, &drafter, sampler, vocab, {k, false});
  std::vector<uint64_t> counts(static_cast<size_t>(vocab), 0);
  for (uint64_t i = 0; i < draws; ++i) {
    ++counts[decoder.step(context).front()];
    session->rewind(start);
  }
  SampledSpeculation out;
  for (double v : p) out.support += v > 0;
  out.chi_square = chi_square(counts, p, draws);
  out.limit = chi_square_limit(out.support - 1);
  out.stats = decoder.stats();
  return out;
}

}  // namespace deltafin::test
