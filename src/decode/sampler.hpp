// Picks the next token from logits. Temperature 0 is greedy (lowest id on ties). Otherwise, as
// transformers' logits processors do, in this order: temperature, top-k, top-p (the smallest set
// of most likely tokens whose probability reaches p), min-p (drop tokens below min_p times the
// top probability); then one draw from what is left, renormalised, with a seeded generator, so
// a seed makes a run reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace deltafin {

struct SamplerOptions {
  float temperature = 0.0f;
  int64_t top_k = 0;     // 0: off
  float top_p = 1.0f;    // 1: off
  float min_p = 0.0f;    // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  int32_t sample(const std::vector<float>& logits);

  bool greedy() const { return options_.temperature <= 0.0f; }
  const SamplerOptions& options() const { return options_; }
  // The distribution sample() draws from (temperature > 0): probabilities over the vocabulary.
  std::vector<double> distribution(const std::vector<float>& logits) const;
  // One draw from probabilities p (summing to 1), and one uniform number in [0, 1), from the
  // seeded generator (speculative verification uses both).
  int32_t draw(const std::vector<double>& p);
  double uniform();

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace deltafin
