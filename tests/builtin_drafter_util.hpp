// Helpers of the built-in drafters' tests (test_dspark.cpp, test_eagle3.cpp): an engine with a
// drafter attached, a greedy block with the logits each guess was chosen from, and small
// comparisons against the numpy references' fixtures.
#pragma once

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/drafter.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"
#include "test_util.hpp"

namespace deltafin::test {

enum class BuiltInDrafter { DSpark, Eagle3 };

// `target` a fixture name, `dir` the drafter's directory.
inline std::unique_ptr<Engine> open_with_drafter(BuiltInDrafter kind, const std::string& target, const std::string& dir,
                                                 int threads = 2, const std::string& backend = "cpu") {
  EngineOptions o;
  o.backend = backend;
  o.model_dir = fixture(target);
  (kind == BuiltInDrafter::DSpark ? o.dspark_dir : o.eagle3_dir) = dir;
  o.threads = threads;
  o.cache_gb = 0.5;
  return Engine::open(o);
}

inline std::vector<int32_t> ints(simdjson::dom::element e) {
  std::vector<int32_t> out;
  for (int64_t v : e.get_array()) out.push_back(static_cast<int32_t>(v));
  return out;
}

struct Drafted {
  BlockDraft block;
  std::vector<float> logits;  // [k, vocab] as the drafter chose from them
};

inline Drafted draft_greedy(Session& session, int32_t anchor, int k) {
  Drafted d;
  d.block = session.draft_block(anchor, k, [&](std::span<const float> row) {
    d.logits.insert(d.logits.end(), row.begin(), row.end());
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  });
  return d;
}

inline double max_diff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Greedy output with `drafter` (at k = 1, 3 and 6, on two prompts, 20 tokens) equals plain
// decoding, and the drafter guessed.
inline void check_greedy_equals_plain(Engine& engine, Drafter& drafter) {
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{225, 107, 129, 197, 181, 172, 316, 130},
                                              std::vector<int32_t>{5, 9, 5, 9, 5, 9, 11}}) {
    for (int k : {1, 3, 6}) {
      INFO("k " << k);
      std::vector<std::vector<int32_t>> outputs;
      SpeculativeStats stats;
      for (Drafter* d : {static_cast<Drafter*>(nullptr), &drafter}) {
        auto session = engine.new_session();
        Sampler sampler(SamplerOptions{});
        SpeculativeDecoder decoder(*session, d, sampler, engine.summary().vocab_size, {d ? k : 0, false});
        std::vector<int32_t> context = prompt;
        context.push_back(sampler.sample(session->append(prompt, false)));
        while (context.size() < prompt.size() + 20)
          for (int32_t t : decoder.step(context)) context.push_back(t);
        context.resize(prompt.size() + 20);
        outputs.push_back(context);
        stats = decoder.stats();
      }
      CHECK(outputs[0] == outputs[1]);
      CHECK(stats.drafted > 0);
    }
  }
}

}  // namespace deltafin::test
