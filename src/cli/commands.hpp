// Subcommands of the deltafin binary. Each registers its flags on the CLI11 app and returns
// the function that runs it; errors escape as deltafin::Error and are printed by main().
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/host_engine.hpp"
#include "decode/drafter.hpp"
#include "decode/prefix_cache.hpp"
#include "decode/sampler.hpp"
#include "decode/speculative.hpp"

namespace deltafin::cli {

// A registered subcommand: its CLI11 node and the function that runs it once parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// The bundled default model (Stage 4), relative to the repository root.
inline constexpr const char* kBundledModel = "models/default";

// `given` when not empty, else the bundled model: $DELTAFIN_MODEL, then models/default next to
// the binary's build directory, then ./models/default. Throws when none exists.
std::string model_dir_or_default(const std::string& given);

// Flags every model-running command shares: -m (optional), --cache-gb, --threads, --chunk,
// --no-bypass.
void add_engine_flags(CLI::App& app, EngineOptions& options);
// Under `mpirun -n N`, whether this process is an expert host (rank 1..N-1): run, serve and
// logits then serve rank 0 (decode/host_engine.hpp) instead of generating.
bool expert_host_rank();

// Throws Error "stdout: <reason>" once a write to stdout has failed (a full disk, a reader that
// went away while SIGPIPE is ignored): output that was lost is an error, never exit 0.
void check_stdout();

// Parses "1,17,300" into ids; throws deltafin::Error naming the flag on bad input.
std::vector<int32_t> parse_token_list(const std::string& text, const char* flag);

// The engines of a generating command: the target, and the drafter --draft asks for (nullptr:
// none). draft_flag: auto, off, model or ngram; sampler: the target's sampling (the draft model
// samples under the same transform); positions: what the caller means to reach.
struct RunEngines {
  std::unique_ptr<Engine> target;
  std::unique_ptr<Drafter> drafter;
  uint64_t draft_bytes = 0;  // everything the draft model holds (its footprint)
};
RunEngines open_engines(const EngineOptions& engine, const std::string& draft_flag, const std::string& draft_model,
                        int max_k, const SamplerOptions& sampler, int64_t positions);

// What one generation did, for the receipt.
struct RunReport {
  double prefill_seconds = 0;
  int64_t prefill_tokens = 0;
  double decode_seconds = 0;
  int64_t decode_tokens = 0;         // tokens the decode produced: the generated ones but the first,
                                     // which comes from the prefill's logits
  int64_t decode_passes = 0;         // target passes of the decode (fewer than tokens under speculation)
  double first_token_seconds = 0;    // from the start of the prefill to the first generated token
  double decode_cpu_seconds = 0;     // CPU time of the compute thread over the decode (cli/compute_starvation.hpp)
  EngineStats at_decode_start;        // to separate decode's expert reads from prefill's
  EngineStats at_decode_end;          // the decode's own counters (the overlap line)
  std::vector<int32_t> generated;
  SpeculativeStats speculative;
  std::string drafter = "off";
  uint64_t state_bytes = 0;           // the target's KV cache and state at the end
  bool page_cache = false;            // --no-bypass: reads went through the page cache
  int64_t prefix_hit = -1;            // --prefix-cache: prompt positions loaded from it (-1: no cache)
  PrefixCacheStats prefix_cache;      // its counters at the end
};

// Prints the --stats receipt to stderr: what a user asks (speed, time to first token, disk reads,
// memory held, speculation in words); full (--stats=full) adds every engine counter.
void print_receipt(const Engine& engine, const RunReport& report, bool full);
// The same figures as JSON (--stats-json FILE).
std::string stats_json(const Engine& engine, const RunReport& report);

Command register_logits(CLI::App& app);
Command register_run(CLI::App& app);
Command register_inspect(CLI::App& app);
Command register_tokenize(CLI::App& app);
Command register_detokenize(CLI::App& app);
Command register_place(CLI::App& app);
Command register_verify(CLI::App& app);
Command register_metal_selftest(CLI::App& app);
Command register_serve(CLI::App& app);

}  // namespace deltafin::cli
