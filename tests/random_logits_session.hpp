// A Session whose logits are random (seeded, normal with sd 4): what a model may propose, anything
// at all, for the constrained-decoding tests and k3-public-bench/structured_bench.cpp (a walk
// through a schema's states, whatever the model).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <deltafin/engine.hpp>

namespace deltafin::test {

class RandomLogitsSession : public Session {
 public:
  RandomLogitsSession(int64_t vocab, uint64_t seed) : vocab_(vocab), rng_(seed) {}
  std::vector<float> append(std::span<const int32_t> tokens, bool all_logits, PassKind) override {
    position_ += static_cast<int64_t>(tokens.size());
    std::vector<float> logits(static_cast<size_t>((all_logits ? tokens.size() : 1) * vocab_));
    std::normal_distribution<float> normal(0.0f, 4.0f);
    for (float& v : logits) v = normal(rng_);
    return logits;
  }
  int64_t position() const override { return position_; }
  uint64_t state_bytes() const override { return 0; }
  void rewind(int64_t pos) override { position_ = pos; }
  StorageReads storage_reads() const override { return {}; }
  std::vector<std::byte> save_state() override { return {}; }
  void load_state(std::span<const int32_t>, std::span<const std::byte>) override {}

 private:
  int64_t vocab_;
  int64_t position_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace deltafin::test
