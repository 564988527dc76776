// DSpark's cost at a target's shapes: one drafter pass (a block of k guesses) against one target
// decode pass, and what the drafter holds; likewise an EAGLE-3 head's chain of k steps when DSPARK
// is one (its config.json names an Eagle3Deepseek architecture). Opens TARGET with the drafter
// DSPARK (the engine's own plan, budget MEMORY_GB), prefills CONTEXT random tokens, then per k times `runs` drafter
// blocks and as many one-position target passes (each rewound), and prints one JSON object per k:
// median seconds, the drafter's weight bytes, the state bytes per position (target and drafter),
// the process's peak.
// Usage: dspark_bench TARGET DSPARK CONTEXT RUNS MEMORY_GB [BACKEND (cpu)]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

using namespace deltafin;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint64_t peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: dspark_bench TARGET DSPARK CONTEXT RUNS MEMORY_GB [BACKEND]\n");
    return 1;
  }
  EngineOptions o;
  o.model_dir = argv[1];
  std::ifstream config(std::string(argv[2]) + "/config.json");
  const std::string json((std::istreambuf_iterator<char>(config)), {});
  (json.find("Eagle3Deepseek") != std::string::npos ? o.eagle3_dir : o.dspark_dir) = argv[2];
  const int64_t context = std::atoll(argv[3]);
  const int runs = std::max(1, std::atoi(argv[4]));
  o.memory_gb = std::atof(argv[5]);
  if (argc == 7) o.backend = argv[6];
  o.positions = context + 16;
  const auto opened = Clock::now();
  auto engine = Engine::open(o);
  const double open_seconds = std::chrono::duration<double>(Clock::now() - opened).count();
  const ModelSummary& m = engine->summary();
  if (m.drafter_bytes == 0) throw std::runtime_error("the drafter is off under this budget");
  std::mt19937_64 rng(7);
  std::vector<int32_t> tokens(static_cast<size_t>(context));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(m.vocab_size - 8));
  auto session = engine->new_session();
  const auto t0 = Clock::now();
  session->append(tokens, false);
  const double prefill = std::chrono::duration<double>(Clock::now() - t0).count();
  const ChooseGuess argmax = [](std::span<const float> row) {
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  };
  const int32_t pending = 17;
  std::vector<double> target;
  for (int r = 0; r < runs; ++r) {
    const auto a = Clock::now();
    session->append(std::vector<int32_t>{pending}, false, PassKind::Decode);
    target.push_back(std::chrono::duration<double>(Clock::now() - a).count());
    session->rewind(context);
  }
  for (int k : {1, 2, 4, 8}) {
    std::vector<double> draft;
    size_t guesses = 0;
    for (int r = 0; r < runs; ++r) {
      const auto a = Clock::now();
      guesses = session->draft_block(pending, k, argmax).tokens.size();
      draft.push_back(std::chrono::duration<double>(Clock::now() - a).count());
    }
    std::printf("{\"context\": %lld, \"k\": %d, \"guesses\": %zu, \"draft_seconds\": %.6f, \"target_decode_seconds\": %.6f, "
                "\"drafter_bytes\": %llu, \"state_bytes_per_position\": %llu, "
                "\"prefill_seconds\": %.3f, \"open_seconds\": %.3f, \"peak_rss_bytes\": %llu, \"backend\": \"%s\"}\n",
                static_cast<long long>(context), k, guesses, median(draft), median(target),
                static_cast<unsigned long long>(m.drafter_bytes),
                static_cast<unsigned long long>(m.state_bytes_per_position), prefill, open_seconds,
                static_cast<unsigned long long>(peak_rss()), m.backend.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dspark_bench: %s\n", e.what());
  return 1;
}
