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

}  // namespace deltafin::test
