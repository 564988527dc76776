// Picks the next token from logits: greedy at temperature 0 (lowest id on ties), otherwise a
// draw from softmax(logits / temperature) with a seeded generator, so runs are reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace deltafin {

class Sampler {
 public:
  Sampler(float temperature, uint64_t seed) : temperature_(temperature), rng_(seed) {}
  int32_t sample(const std::vector<float>& logits);

 private:
  float temperature_;
  std::mt19937_64 rng_;
};

}  // namespace deltafin
