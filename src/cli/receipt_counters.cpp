// The engine's counters under the receipt's user lines (--stats=full), for whoever tunes or
// debugs a run: prefill and decode with target passes, expert reads and cache hits, what the
// speculation counted, experts per decode pass, lookahead, device time, how the decode
// overlapped compute and reads (cli/overlap.hpp), each drive, peak memory by part, the memory
// plan (--memory-gb: what is resident, what streams), the spine bytes streamed, and the ids' hash.
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/overlap.hpp"
#include "cli/receipt_format.hpp"
#include "util/ids_hash.hpp"
#include "util/memory.hpp"

namespace deltafin::cli {
namespace {

constexpr double kGB = 1e9;

double rate(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

}  // namespace

void print_engine_counters(const Engine& engine, const RunReport& r) {
  const EngineStats s = engine.stats();
  const ModelSummary& m = engine.summary();
  const SpeculativeStats& sp = r.speculative;
  const uint64_t lookups = s.expert_hits + s.expert_misses;
  const uint64_t decode_bytes = s.expert_bytes_read - r.at_decode_start.expert_bytes_read;
  const uint64_t decode_runs = s.expert_runs - r.at_decode_start.expert_runs;
  const uint64_t decode_passes = s.passes - r.at_decode_start.passes;
  const int64_t moe_layers = std::max<int64_t>(m.moe_layers, 1);
  std::fprintf(stderr, "--- engine counters ---\n");
  std::fprintf(stderr, "prefill   %" PRId64 " tokens in %.3f s (%.2f tok/s); %" PRIu64 " passes of at most %" PRId64
               " positions (activations %.4f GB planned, %.4f GB peak); %.4f GB of experts read = %.2fx the union "
               "routed to (%.4f GB)\n",
               r.prefill_tokens, r.prefill_seconds, rate(r.prefill_tokens, r.prefill_seconds), r.at_decode_start.passes,
               m.pass_positions, m.pass_activation_bytes / kGB, r.at_decode_start.activation_peak_bytes / kGB,
               r.at_decode_start.expert_bytes_read / kGB, prefill_read_over_union(r.at_decode_start),
               r.at_decode_start.union_expert_bytes / kGB);
  std::fprintf(stderr, "decode    %" PRId64 " tokens in %" PRId64 " target passes, %.3f s (%.2f tok/s); %.4f GB of experts "
               "read per token\n",
               r.decode_tokens, r.decode_passes, r.decode_seconds, rate(r.decode_tokens, r.decode_seconds),
               r.decode_tokens ? decode_bytes / kGB / r.decode_tokens : 0.0);
  // A routing choice is one (position, layer, expert); the positions of a pass that chose the
  // same expert share one run of it.
  std::fprintf(stderr, "experts   %.4f GB read from %s in %" PRIu64 " reads; cache hit rate %.1f%%; %" PRIu64
               " routing choices ran as %" PRIu64 " expert runs; %" PRIu64 " experts read twice within a pass; "
               "waited %.3f s for reads\n",
               s.expert_bytes_read / kGB, s.expert_source.c_str(), s.expert_misses,
               lookups ? 100.0 * s.expert_hits / lookups : 0.0, s.expert_selections, s.expert_runs,
               s.repeat_reads_in_pass, s.io_wait_seconds);
  if (r.drafter != "off")
    std::fprintf(stderr, "guesses   %s: %" PRIu64 " of %" PRIu64 " accepted (%.1f%%) in %" PRIu64 " verify passes; %.2f "
                 "tokens per target pass; %" PRIu64 " more checked on the side while measuring or off (%" PRIu64
                 " right), %" PRIu64 " re-checks while off; drafting %.3f s\n",
                 r.drafter.c_str(), sp.accepted, sp.drafted, sp.drafted ? 100.0 * sp.accepted / sp.drafted : 0.0,
                 sp.verify_passes, sp.steps ? static_cast<double>(sp.committed) / sp.steps : 0.0, sp.shadow_guesses,
                 sp.shadow_accepted, sp.probes, sp.draft_seconds);
  if (decode_passes)
    std::fprintf(stderr, "per pass  %.1f experts per MoE layer per decode pass; %.4f GB of experts read per committed token\n",
                 static_cast<double>(decode_runs) / decode_passes / moe_layers,
                 sp.committed ? decode_bytes / kGB / sp.committed : 0.0);
  if (s.prefetch_reads)
    std::fprintf(stderr, "lookahead %" PRIu64 " guessed reads (%.4f GB), %" PRIu64 " used (%.1f%%), %" PRIu64
                 " cancelled unread\n",
                 s.prefetch_reads, s.prefetch_bytes / kGB, s.prefetch_used, 100.0 * s.prefetch_used / s.prefetch_reads,
                 s.prefetch_cancelled);
  if (s.device_spine_seconds > 0 || s.device_expert_seconds > 0)
    std::fprintf(stderr, "device    %.4f s spine ops, %.4f s expert kernels; %.4f GB copied into device memory in %.4f s\n",
                 s.device_spine_seconds, s.device_expert_seconds, s.device_upload_bytes / kGB, s.device_upload_seconds);
  if (r.decode_tokens) {
    const Overlap o = decode_overlap(r.at_decode_start, r.at_decode_end, r.decode_seconds);
    std::fprintf(stderr, "overlap   decode %.3f s: compute %.3f s (plus %.3f s waiting for reads), the busiest drive "
                 "busy %.3f s; with compute and reads fully overlapped it would take the larger, %.3f s: %.1f%% of "
                 "that reached\n",
                 o.wall, o.compute, o.read_wait, o.io, o.bound, 100.0 * o.fraction);
  }
  for (size_t d = 0; d < s.drives.size(); ++d) {
    const DriveReport& dr = s.drives[d];
    std::fprintf(stderr, "drive %zu   %.4f GB in %" PRIu64 " reads, %.2f GB/s while busy (%.3f s)%s%s  %s\n", d,
                 dr.bytes / kGB, dr.reads, rate(dr.bytes / kGB, dr.busy_seconds), dr.busy_seconds,
                 dr.failed ? " FAILED" : "",
                 dr.bad_copies ? fmt::format(", {} bad copies (read again from another drive)", dr.bad_copies).c_str() : "",
                 dr.path.c_str());
  }
  std::fprintf(stderr,
               "rss       peak %.4f GB = spine %.4f GB + expert memory peak %.4f GB (budget %.4f GB) + KV cache and state "
               "%.4f GB (%.1f KB a position) + rest\n",
               peak_rss_bytes() / kGB, m.spine_bytes / kGB, s.peak_cache_bytes / kGB, s.cache_budget_bytes / kGB,
               r.state_bytes / kGB, m.state_bytes_per_position / 1e3);
  // Two pools (a GPU of its own memory): the plan's figures are the device's, then the host's share.
  const bool two_pools = m.device_memory_budget > 0;
  std::fprintf(stderr,
               "budget    %.4f GB%s (%s): spine %.4f GB resident + %.4f GB streamed (%" PRIu64 " of %" PRIu64
               " units, window %.4f GB), experts %.4f GB, working %.4f GB; minimum %.4f GB\n",
               (two_pools ? m.device_memory_budget : m.memory_budget) / kGB, two_pools ? " on the device" : "",
               (two_pools ? m.device_memory_source : m.memory_source).c_str(), m.spine_resident_bytes / kGB,
               m.spine_streamed_bytes / kGB, m.spine_units_streamed, m.spine_units, m.spine_window_bytes / kGB,
               m.expert_budget_bytes / kGB, m.working_bytes / kGB, m.minimum_bytes / kGB);
  if (two_pools)
    std::fprintf(stderr, "host      %.4f GB (%s): streamed spine %.4f GB held, %.4f GB from the drives; minimum %.4f GB\n",
                 m.memory_budget / kGB, m.memory_source.c_str(), m.spine_host_bytes / kGB,
                 (m.spine_streamed_bytes - m.spine_host_bytes) / kGB, m.host_minimum_bytes / kGB);
  const uint64_t decode_spine = s.spine_bytes_read - r.at_decode_start.spine_bytes_read;
  // A verify pass reads the streamed spine once for all its positions: per committed token it
  // falls with acceptance. Streamed spine bytes come from the placement's spine records where it
  // has them, else from the shards (a placement written before manifest v3, or none).
  std::fprintf(stderr,
               "spine     %.4f GB streamed in all (%.4f GB of it from spine records); %.4f GB per decode pass, %.4f GB per "
               "committed token\n",
               s.spine_bytes_read / kGB, s.spine_record_bytes_read / kGB, decode_passes ? decode_spine / kGB / decode_passes : 0.0,
               sp.committed ? decode_spine / kGB / sp.committed : 0.0);
  std::fprintf(stderr, "ids hash  %s (%zu ids)\n", ids_hash_text(r.generated).c_str(), r.generated.size());
}

}  // namespace deltafin::cli
