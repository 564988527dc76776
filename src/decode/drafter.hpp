// Drafters guess the tokens that follow the committed sequence; the target checks every guess
// (decode/speculative.hpp). They never decide a token.
//   ngram:  prompt lookup: the longest earlier occurrence (2 to 8 tokens) of the sequence's end,
//           and the tokens that followed it. No model, no I/O.
//   model:  a small draft model sharing the tokenizer, run by its own Engine/Session held in RAM;
//           greedy when the target decodes greedily, else it samples from its own distribution
//           under the same sampling transform and reports that distribution (q) for the
//           rejection rule.
//   dspark: Kimi K3's DSpark, built into the target's engine (EngineOptions::dspark_dir): a block
//           of guesses in one drafter pass conditioned on the target's own hidden rows
//           (Session::draft_block), with a confidence per guess; sampled like `model`.
//   eagle3: an EAGLE-3 head for Kimi K3 (EngineOptions::eagle3_dir), built in the same way: one
//           MLA layer on the target's rows at three layers, a chain of guesses, no confidence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/sampler.hpp"

namespace deltafin {

struct Draft {
  std::vector<int32_t> tokens;          // d1..dk (k may be less than asked, or 0)
  std::vector<std::vector<double>> q;   // q_i over the vocabulary when sampled; empty: deterministic
  // The drafter's predicted probability that guess i is accepted given guesses 1..i-1 were (a
  // confidence head), one per guess; empty: the drafter has none. Only the speculative loop's
  // choice of k reads it (calibrated against measured acceptance); it never decides a token.
  std::vector<double> confidence;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // context: every committed token (prompt and generated), the last one not yet scored by the
  // target. Returns at most k guesses of the tokens after it.
  virtual Draft propose(std::span<const int32_t> context, int k) = 0;
  // The target session being decoded (a drafter that reads its passes keeps it); called before
  // the first propose of a generation.
  virtual void bind(Session& target) { (void)target; }
};

std::unique_ptr<Drafter> make_ngram_drafter();
// `draft` must share the target's vocabulary. sampling: the target's sampling options (the draft
// uses the same transform, with its own generator).
std::unique_ptr<Drafter> make_model_drafter(std::unique_ptr<Engine> draft, const SamplerOptions& sampling);
// The drafter built into the target's engine (EngineOptions::dspark_dir), for whichever session
// it is bound to.
// name: what it reports as (the receipt's drafter), "dspark" or "eagle3".
std::unique_ptr<Drafter> make_builtin_drafter(const SamplerOptions& sampling, const std::string& name = "dspark");

}  // namespace deltafin
