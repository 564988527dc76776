// The server's counters, rendered for GET /metrics in Prometheus' text format: requests by
// endpoint and status, prompt tokens (and how many a held session kept), generated tokens,
// decode speed and time to first token of the last generation, the held sessions (prefix hits
// and the positions they saved, sessions held and dropped, their bytes against their share),
// and the engine's figures (expert bytes read, cache hit rate, each drive's GB/s while busy,
// memory against the budget), and the cost of constrained decoding (structured output, forced
// tool calls): tokens decoded under a constraint and the seconds spent masking them. The engine's and the sessions' figures are a snapshot taken after
// each generation, by the thread that ran it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <deltafin/engine.hpp>

#include "serve/generator.hpp"
#include "serve/session_cache.hpp"

namespace deltafin::serve {

class Metrics {
 public:
  void count_request(const std::string& endpoint, int status);
  void count_generation(const GenerationResult& result);
  void set_engine_snapshot(const EngineStats& stats, const SessionCacheStats& sessions);
  // memory_budget: what the server's peak RSS is expected to stay within.
  std::string render(bool running, int queue_waiting, uint64_t memory_budget) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t generations_ = 0, cancelled_ = 0;
  uint64_t prompt_tokens_ = 0, reused_tokens_ = 0, completion_tokens_ = 0, constrained_tokens_ = 0;
  double constraint_seconds_ = 0;
  double last_decode_tokens_per_second_ = 0, last_first_token_seconds_ = 0;
  EngineStats engine_;
  SessionCacheStats sessions_;
};

}  // namespace deltafin::serve
