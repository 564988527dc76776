// The narrow engine API the CLI (and later a server) uses: an Engine is a loaded model with
// its expert store and backend; a Session is one token timeline with its cache, which can be
// extended and rewound. Callers never see tensors or kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace deltafin {

// What a forward pass is for (routing traces record it): the prompt, one generated token, or a
// speculative draft checked in one pass.
enum class PassKind : uint8_t { Prefill = 0, Decode = 1, Verify = 2 };

struct EngineOptions {
  std::string model_dir;
  // The one memory budget (--memory-gb): spine, expert cache, KV cache and state, a draft model,
  // working memory. 0: the machine's free memory less headroom (decode/memory_plan.hpp).
  double memory_gb = 0;
  // The device's budget (--device-memory-gb) where the device has memory the host cannot write
  // (CUDA): the device-resident spine and the window streamed units pass through, the expert
  // cache, KV cache and state, working memory; memory_gb is then the host's, which holds the
  // streamed units where they fit (the rest stream from the drives). 0: the device's free memory
  // less a margin (decode/memory_plan.hpp). With one pool (CPU, Metal) it is memory_gb's budget.
  double device_memory_gb = 0;
  // The routed-expert share of it (--cache-gb): 0 = what the budget leaves once the spine is
  // placed; else at most this much, exactly this much when given by the user (refused, not
  // lowered, when it does not fit).
  double cache_gb = 0;
  bool cache_gb_given = false;
  int threads = 0;         // 0: one per hardware thread
  std::string backend = "cpu";  // cpu, cuda, metal, or auto (CUDA or Metal when a device is present, else CPU)
  // The most positions a prefill pass takes (--chunk): 0 = as many as the memory plan gives
  // (ModelSummary::pass_positions); else the plan's pass at most this large.
  int64_t chunk = 0;
  bool bypass = true;      // read routed experts around the page cache (O_DIRECT / F_NOCACHE)
  // Placement manifest (deltafin place): "" = <model_dir>/deltafin-placement.json when it
  // exists, else the original shards; "none" = always the shards.
  std::string placement;
  int io_depth = 8;            // reads in flight per drive
  double io_piece_mb = 1.0;    // records are read in concurrent pieces of this size
  bool lookahead = false;      // prefetch the next layer's likely experts (router lookahead)
  bool record_routing = false; // keep a routing trace of every pass (Engine::routing_trace)
  // A drafter built into the engine (--draft dspark|eagle3 --draft-model DIR): Kimi K3's DSpark or
  // an EAGLE-3 head, which read the target's hidden rows of every pass (Session::draft_block).
  // Their weights, latent cache and captured rows are in the memory budget. "": none (at most one).
  std::string dspark_dir;
  std::string eagle3_dir;
  // Memory planning (compared with what the machine has free at open): the positions the caller
  // means to reach (prompt + new tokens), whose KV cache and state are counted; and bytes held
  // back for others in the process (a draft model's expert share). Positions are counted up to the
  // model's context length.
  int64_t positions = 0;
  uint64_t reserved_bytes = 0;
  // Under `mpirun -n N` (N > 1): whether this engine's routed experts are shared with the other
  // hosts (the target: yes; a draft model runs on rank 0 alone), and how long rank 0 waits for a
  // host's answer before it ends the run naming that host (--host-timeout).
  bool across_hosts = true;
  double host_timeout = 60;
};

struct ModelSummary {
  std::string architecture;     // e.g. "kimi_k2 (DeepSeek-V3)"
  std::string backend;          // what runs the ops, e.g. "cpu (AVX3_DL, 2 threads)"
  int64_t vocab_size = 0;
  int64_t eos_token_id = -1;
  int64_t context_length = 0;   // max_position_embeddings; 0: not stated
  uint64_t spine_bytes = 0;     // resident weights (streamed spine units not counted)
  uint64_t drafter_bytes = 0;   // a built-in drafter's weights (EngineOptions::dspark_dir, eagle3_dir); 0: none
  uint64_t state_bytes_per_position = 0;  // KV/latent cache a position adds (with rewind snapshots)
  // A session's state is append-only (K2's latent cache): a rewind recomputes nothing. False
  // with a recurrent state (K3), where a rewind past its snapshots replays from the start.
  bool append_only_state = false;
  uint64_t planned_state_bytes = 0;       // KV cache and state for EngineOptions::positions
  uint64_t routed_expert_bytes = 0;       // every routed expert record (what a budget beyond it cannot use)
  int64_t moe_layers = 0;       // layers with routed experts
  // The memory plan (decode/memory_plan.hpp): the budget and where it came from, the spine's
  // resident and streamed bytes (from config.json) and the window streamed units pass through,
  // the expert share, the smallest budget that runs, and what the engine holds beside another
  // one in the process (footprint: its working memory without the runtime's floor).
  uint64_t memory_budget = 0;
  std::string memory_source;    // "--memory-gb", "MemAvailable less 5% headroom", ...
  uint64_t spine_resident_bytes = 0, spine_streamed_bytes = 0, spine_window_bytes = 0;
  uint64_t spine_units = 0, spine_units_streamed = 0;
  uint64_t expert_budget_bytes = 0, working_bytes = 0, minimum_bytes = 0, footprint_bytes = 0;
  // Two pools (a device the host cannot write): the figures above are the device's, under
  // device_memory_budget; memory_budget is the host's, which holds spine_host_bytes of the
  // streamed units (the rest stream from the drives). device_memory_budget 0: one pool.
  uint64_t device_memory_budget = 0;
  std::string device_memory_source;
  uint64_t spine_host_bytes = 0, host_minimum_bytes = 0;
  // Prefill passes: the positions a pass takes (the plan's choice under --chunk), the activation
  // bytes one position adds to a pass, and what the plan counts for the pass's activations.
  int64_t pass_positions = 1;
  uint64_t activation_bytes_per_position = 0, pass_activation_bytes = 0;
};

struct DriveReport {
  std::string path;          // data file (placement) or model directory (shards)
  uint64_t bytes = 0;
  uint64_t reads = 0;
  uint64_t errors = 0;
  double busy_seconds = 0;   // time with a read in flight
  bool failed = false;
  uint64_t bad_copies = 0;   // records from it that failed their check (XXH3, or NaN/Inf), read again elsewhere
};

// One host of a run on several hosts (rank 0's view; rank 0's own reads are EngineStats').
struct HostReport {
  int rank = 0;
  std::string name;                 // its processor name
  uint64_t expert_runs = 0;         // (layer, expert) runs it did, once per pass each
  uint64_t expert_bytes_read = 0, hits = 0, misses = 0;
  uint64_t cache_budget_bytes = 0;
  double busy_seconds = 0;          // running rank 0's requests (reads waited for included)
  double io_wait_seconds = 0;       // of which waiting for its reads
  double drive_busy_seconds = 0;    // its busiest drive's time with a read in flight
  uint64_t round_trips = 0;         // rank 0's Run -> Result exchanges with it
  double round_trip_seconds = 0;    // their sum
  double stall_seconds = 0;         // rank 0 waiting for it after running its own experts
  double network_seconds = 0;       // of that wait, the part its round trips less its work explain
  uint64_t bytes_to = 0, bytes_from = 0;  // messages rank 0 sent it, and received
};

struct EngineStats {
  uint64_t expert_bytes_read = 0;   // demand + prefetch
  uint64_t spine_bytes_read = 0;    // streamed spine units read (each once per pass)
  uint64_t spine_record_bytes_read = 0;  // of those, read from the placement's spine records
  uint64_t expert_hits = 0;
  uint64_t expert_misses = 0;
  uint64_t peak_cache_bytes = 0;
  uint64_t cache_budget_bytes = 0;
  uint64_t passes = 0;
  uint64_t positions = 0;
  uint64_t expert_runs = 0;         // experts run (once per pass each)
  uint64_t expert_selections = 0;   // routed selections (positions x layers x top-k)
  uint64_t repeat_reads_in_pass = 0;  // an expert read twice within one pass (always 0)
  // Bytes of the union of routed experts requested so far, each record once: what reading every
  // routed expert once would cost (expert_bytes_read / this is the prefill's re-read factor).
  uint64_t union_expert_bytes = 0;
  uint64_t activation_peak_bytes = 0;  // the most a pass's activations held in the model's scratch
  uint64_t prefetch_reads = 0;
  uint64_t prefetch_used = 0;
  uint64_t prefetch_bytes = 0;
  uint64_t prefetch_cancelled = 0;  // guesses dropped unread when their layer chose otherwise
  double io_wait_seconds = 0;       // compute waiting for expert reads
  double spine_wait_seconds = 0;    // compute waiting for streamed spine units
  // Busy time (a read in flight) of the queue streamed spine units are read through: with a
  // placement the model directory's, else the one drive of `drives`.
  double spine_drive_busy_seconds = 0;
  // Device time (CUDA with DELTAFIN_DEVICE_PROFILE=1; else all 0): the spine's ops, the expert
  // op's kernels, and the copies of expert records into device memory.
  double device_spine_seconds = 0, device_expert_seconds = 0, device_upload_seconds = 0;
  uint64_t device_upload_bytes = 0;
  std::string expert_source;        // placement manifest path, or "shards"
  std::vector<DriveReport> drives;
  std::vector<HostReport> hosts;    // a run on several hosts (mpirun): one per rank, rank 0 first; else empty
};

// A built-in drafter's guesses (Session::draft_block): tokens, and per guess the drafter's chance
// that it is accepted given the guesses before it were (empty when it has no confidence head).
struct BlockDraft {
  std::vector<int32_t> tokens;
  std::vector<double> confidence;
};
// Picks a guess from its logits [vocab] (the drafter's, for one position).
using ChooseGuess = std::function<int32_t(std::span<const float> logits)>;

// Bytes a session's engine has read from storage so far.
struct StorageReads {
  uint64_t spine = 0;    // streamed spine units: once a pass, whatever its width
  uint64_t experts = 0;  // routed experts missed by the cache (demand and prefetch)
};

// The routed experts a session's last forward pass requested: the union of its positions'
// choices, each (layer, expert) once. What the speculative loop's cost model prices a pass from.
struct PassExperts {
  int64_t positions = 0;        // positions the pass ran (0: the engine does not say)
  uint64_t selections = 0;      // (position, layer, top-k slot) choices
  std::vector<uint64_t> pairs;  // the union: layer << 32 | expert, ascending
  uint64_t bytes = 0;           // their records' bytes
  uint64_t missed = 0;          // of the pairs, those not in memory nor being read when requested
};

class Session {
 public:
  virtual ~Session() = default;
  // Appends tokens (in passes of at most ModelSummary::pass_positions). Returns logits [n, vocab] of every
  // appended position when all_logits, else [vocab] of the last one.
  // `kind` only labels the passes in a routing trace.
  virtual std::vector<float> append(std::span<const int32_t> tokens, bool all_logits,
                                    PassKind kind = PassKind::Prefill) = 0;
  virtual int64_t position() const = 0;
  // Bytes the KV cache and recurrent state hold now (rewind snapshots included).
  virtual uint64_t state_bytes() const = 0;
  // Forgets positions >= pos (pos <= position()): KV truncated, recurrent state restored. Experts
  // that only the forgotten positions of the last pass used go to the cold end of the cache.
  virtual void rewind(int64_t pos) = 0;
  virtual StorageReads storage_reads() const = 0;
  // The routed experts of the last forward pass (positions 0: not known).
  virtual PassExperts last_pass_experts() const { return {}; }
  // The state at position() as bytes (the latent KV cache rows 0..position()-1, K3's recurrent
  // state and conv windows), behind a header of the family, shapes and positions
  // (src/model/state_bytes.hpp). The values are this backend's: reloading is bit-identical within one backend.
  virtual std::vector<std::byte> save_state() = 0;
  // Makes this session hold `tokens` (position() == tokens.size()) with `state` saved by
  // save_state() of a session of the same engine at that position. Throws deltafin::Error (one
  // line) when the bytes do not fit this engine; the session is then unchanged.
  virtual void load_state(std::span<const int32_t> tokens, std::span<const std::byte> state) = 0;
  // With a drafter built into the engine (EngineOptions::dspark_dir): up to k guesses of the
  // tokens after `pending` (the next token, at position()), from this session's own passes; none
  // when the engine has no such drafter or this session's passes did not cover every position
  // (a state loaded by load_state). The session's state is unchanged.
  virtual BlockDraft draft_block(int32_t pending, int k, const ChooseGuess& choose) {
    (void)pending, (void)k, (void)choose;
    return {};
  }
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Loads config, index and spine; throws deltafin::Error with a one-line message on bad input.
  static std::unique_ptr<Engine> open(const EngineOptions& options);

  virtual const ModelSummary& summary() const = 0;
  virtual std::unique_ptr<Session> new_session() = 0;
  virtual EngineStats stats() const = 0;
  // Requests per (layer, expert) so far, as usage-statistics JSON for `deltafin place --usage`.
  virtual std::string usage_json() const = 0;
  // The routing trace so far (docs/routing-traces.md) when EngineOptions::record_routing; else empty.
  virtual std::string routing_trace() const = 0;
  // What a session's saved state (Session::save_state) depends on besides its tokens: the model,
  // the backend and its kernels, the build (src/decode/state_fingerprint.hpp). Reads samples of
  // the weight files; the prefix cache keys its entries by it.
  virtual std::string state_fingerprint() const = 0;
};

}  // namespace deltafin
