// Prometheus text rendering of the server's counters (see metrics.hpp).
#include "serve/metrics.hpp"

#include <fmt/format.h>

#include "util/memory.hpp"

namespace deltafin::serve {
namespace {

// A label value: backslashes, quotes and newlines escaped.
std::string label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A metric with one unlabelled sample.
template <class T>
void single(std::string& out, const char* name, const char* type, const char* help, const T& value) {
  metric(out, name, type, help);
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::count_generation(const GenerationResult& r) {
  std::lock_guard lock(mutex_);
  ++generations_;
  if (r.finish_reason == "cancelled") ++cancelled_;
  prompt_tokens_ += r.prompt_tokens;
  reused_tokens_ += r.reused_tokens;
  completion_tokens_ += r.ids.size();
  constrained_tokens_ += static_cast<uint64_t>(r.constraint_steps);
  constraint_seconds_ += r.constraint_seconds;
  if (r.decode_seconds > 0 && r.decode_passes > 0)
    last_decode_tokens_per_second_ = (static_cast<double>(r.ids.size()) - 1) / r.decode_seconds;
  last_first_token_seconds_ = r.first_token_seconds;
}

void Metrics::set_engine_snapshot(const EngineStats& stats, const SessionCacheStats& sessions) {
  std::lock_guard lock(mutex_);
  engine_ = stats;
  sessions_ = sessions;
}

std::string Metrics::render(bool running, int queue_waiting, uint64_t memory_budget) const {
  std::lock_guard lock(mutex_);
  std::string out;
  metric(out, "deltafin_requests_total", "counter", "HTTP requests by endpoint and status");
  for (const auto& [key, n] : requests_)
    out += fmt::format("deltafin_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", label(key.first), key.second, n);
  single(out, "deltafin_generations_total", "counter", "Generations run (cancelled ones included)", generations_);
  single(out, "deltafin_generations_cancelled_total", "counter", "Generations stopped by a disconnect or shutdown",
         cancelled_);
  single(out, "deltafin_prompt_tokens_total", "counter", "Prompt tokens of all generations", prompt_tokens_);
  single(out, "deltafin_prompt_tokens_reused_total", "counter", "Prompt tokens kept from a held session (not prefilled again)",
         reused_tokens_);
  single(out, "deltafin_completion_tokens_total", "counter", "Generated tokens", completion_tokens_);
  single(out, "deltafin_constrained_tokens_total", "counter",
         "Tokens decoded under a constraint (response_format, a forced tool call)", constrained_tokens_);
  single(out, "deltafin_constraint_seconds_total", "counter", "Seconds spent masking and accepting those tokens",
         fmt::format("{:.6f}", constraint_seconds_));
  single(out, "deltafin_decode_tokens_per_second", "gauge", "Decode speed of the last generation",
         fmt::format("{:.3f}", last_decode_tokens_per_second_));
  single(out, "deltafin_first_token_seconds", "gauge", "Time to first token of the last generation",
         fmt::format("{:.6f}", last_first_token_seconds_));
  single(out, "deltafin_generation_running", "gauge", "1 while a generation holds the engine", running ? 1 : 0);
  single(out, "deltafin_queue_waiting", "gauge", "Requests waiting for the engine", queue_waiting);
  single(out, "deltafin_expert_bytes_read_total", "counter", "Routed-expert bytes read from storage",
         engine_.expert_bytes_read);
  const uint64_t lookups = engine_.expert_hits + engine_.expert_misses;
  single(out, "deltafin_expert_cache_hit_ratio", "gauge", "Expert cache hits over lookups",
         fmt::format("{:.6f}", lookups ? static_cast<double>(engine_.expert_hits) / lookups : 0.0));
  metric(out, "deltafin_drive_read_bytes_total", "counter", "Bytes read per drive");
  for (const DriveReport& d : engine_.drives)
    out += fmt::format("deltafin_drive_read_bytes_total{{drive=\"{}\"}} {}\n", label(d.path), d.bytes);
  metric(out, "deltafin_drive_bad_copies_total", "counter",
         "Records read from a drive that failed their check (XXH3, or NaN/Inf) and were read again elsewhere");
  for (const DriveReport& d : engine_.drives)
    out += fmt::format("deltafin_drive_bad_copies_total{{drive=\"{}\"}} {}\n", label(d.path), d.bad_copies);
  metric(out, "deltafin_drive_gigabytes_per_second", "gauge", "Read rate per drive while a read was in flight (GB/s)");
  for (const DriveReport& d : engine_.drives)
    out += fmt::format("deltafin_drive_gigabytes_per_second{{drive=\"{}\"}} {:.4f}\n", label(d.path),
                       d.busy_seconds > 0 ? d.bytes / 1e9 / d.busy_seconds : 0.0);
  metric(out, "deltafin_prefix_hits_total", "counter", "Requests that kept a prefix, by where it was held");
  out += fmt::format("deltafin_prefix_hits_total{{source=\"memory\"}} {}\n", sessions_.hits);
  if (sessions_.disk) out += fmt::format("deltafin_prefix_hits_total{{source=\"disk\"}} {}\n", sessions_.disk_stats.hits);
  metric(out, "deltafin_prefix_positions_saved_total", "counter", "Prompt positions those prefixes saved from prefill");
  out += fmt::format("deltafin_prefix_positions_saved_total{{source=\"memory\"}} {}\n", sessions_.positions_saved);
  if (sessions_.disk)
    out += fmt::format("deltafin_prefix_positions_saved_total{{source=\"disk\"}} {}\n", sessions_.disk_stats.positions_saved);
  single(out, "deltafin_sessions_held", "gauge", "Sessions held in memory between requests", sessions_.sessions);
  single(out, "deltafin_sessions_dropped_total", "counter", "Sessions dropped (least recently used) to fit the state budget",
         sessions_.dropped);
  single(out, "deltafin_state_bytes", "gauge", "KV cache and recurrent state of the held sessions", sessions_.bytes);
  if (sessions_.disk) {
    single(out, "deltafin_prefix_cache_saves_total", "counter", "Session states written to the prefix cache",
           sessions_.disk_stats.saves);
    single(out, "deltafin_prefix_cache_written_bytes_total", "counter", "State bytes written to the prefix cache",
           sessions_.disk_stats.bytes_written);
    single(out, "deltafin_prefix_cache_evictions_total", "counter", "Prefix cache entries removed to keep its budget",
           sessions_.disk_stats.evictions);
    single(out, "deltafin_prefix_cache_ignored_total", "counter", "Damaged, truncated or foreign prefix cache entries passed over",
           sessions_.disk_stats.ignored);
  }
  single(out, "deltafin_state_budget_bytes", "gauge", "What the held sessions share: the memory plan's planned state",
         sessions_.budget_bytes);
  single(out, "deltafin_memory_peak_rss_bytes", "gauge", "Peak resident memory of the server", peak_rss_bytes());
  single(out, "deltafin_memory_budget_bytes", "gauge", "Spine + expert budget + planned state + runtime allowance",
         memory_budget);
  return out;
}

}  // namespace deltafin::serve
