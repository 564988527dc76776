// The run receipt (--stats, to stderr) and its JSON twin (--stats-json FILE): speed of prefill
// and decode, expert bytes (decode's separately: the storage cost of a token), cache hits, each
// drive's bytes and rate while busy, peak memory against the budget, the memory plan (--memory-gb:
// what is resident, what streams) and the spine bytes streamed, how well the decode overlapped
// compute and reads (cli/overlap.hpp), and the ids' hash.
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "cli/compute_starvation.hpp"
#include "cli/overlap.hpp"
#include "util/error.hpp"
#include "util/ids_hash.hpp"
#include "util/json_string.hpp"
#include "util/memory.hpp"

namespace deltafin::cli {
namespace {

constexpr double kGB = 1e9;

double rate(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

}  // namespace

void print_receipt(const Engine& engine, const RunReport& r) {
  const EngineStats s = engine.stats();
  const uint64_t lookups = s.expert_hits + s.expert_misses;
  const uint64_t decode_bytes = s.expert_bytes_read - r.at_decode_start.expert_bytes_read;
  std::fprintf(stderr, "--- deltafin receipt ---\n");
  std::fprintf(stderr, "model     %s\n", engine.summary().architecture.c_str());
  std::fprintf(stderr, "backend   %s\n", engine.summary().backend.c_str());
  std::fprintf(stderr, "prefill   %" PRId64 " tokens in %.3f s (%.2f tok/s)\n", r.prefill_tokens, r.prefill_seconds,
               rate(r.prefill_tokens, r.prefill_seconds));
  std::fprintf(stderr, "decode    %" PRId64 " tokens in %.3f s (%.2f tok/s), %.4f GB of experts read per token\n",
               r.decode_tokens, r.decode_seconds, rate(r.decode_tokens, r.decode_seconds),
               r.decode_tokens ? decode_bytes / kGB / r.decode_tokens : 0.0);
  std::fprintf(stderr, "experts   %.4f GB read from %s; %" PRIu64 " runs for %" PRIu64 " selections; %" PRIu64
               " reads, %" PRIu64 " repeated within a pass; cache hit rate %.1f%%; I/O wait %.3f s\n",
               s.expert_bytes_read / kGB, s.expert_source.c_str(), s.expert_runs, s.expert_selections, s.expert_misses,
               s.repeat_reads_in_pass, lookups ? 100.0 * s.expert_hits / lookups : 0.0, s.io_wait_seconds);
  const SpeculativeStats& sp = r.speculative;
  const uint64_t decode_runs = s.expert_runs - r.at_decode_start.expert_runs;
  const uint64_t decode_passes = s.passes - r.at_decode_start.passes;
  const int64_t moe_layers = std::max<int64_t>(engine.summary().moe_layers, 1);
  if (r.drafter != "off") {
    std::fprintf(stderr, "draft     %s: %" PRIu64 " of %" PRIu64 " guesses accepted (%.1f%%) in %" PRIu64
                 " verify passes; %.2f tokens per target pass; %" PRIu64 " shadow guesses; drafting %.3f s\n",
                 r.drafter.c_str(), sp.accepted, sp.drafted, sp.drafted ? 100.0 * sp.accepted / sp.drafted : 0.0,
                 sp.verify_passes, sp.steps ? static_cast<double>(sp.committed) / sp.steps : 0.0, sp.shadow_guesses,
                 sp.draft_seconds);
  }
  if (decode_passes)
    std::fprintf(stderr, "union     %.1f experts per MoE layer per decode pass; %.4f GB of experts read per committed token\n",
                 static_cast<double>(decode_runs) / decode_passes / moe_layers,
                 sp.committed ? decode_bytes / kGB / sp.committed : 0.0);
  if (s.prefetch_reads)
    std::fprintf(stderr, "prefetch  %" PRIu64 " reads (%.4f GB), %" PRIu64 " used (%.1f%%), %" PRIu64 " cancelled unread\n",
                 s.prefetch_reads, s.prefetch_bytes / kGB, s.prefetch_used, 100.0 * s.prefetch_used / s.prefetch_reads,
                 s.prefetch_cancelled);
  if (s.device_spine_seconds > 0 || s.device_expert_seconds > 0)
    std::fprintf(stderr, "device    %.4f s spine ops, %.4f s expert kernels; %.4f GB copied into device memory in %.4f s\n",
                 s.device_spine_seconds, s.device_expert_seconds, s.device_upload_bytes / kGB, s.device_upload_seconds);
  if (r.decode_tokens) {
    const Overlap o = decode_overlap(r.at_decode_start, r.at_decode_end, r.decode_seconds);
    std::fprintf(stderr, "overlap   decode %.3f s: compute %.3f s (the compute thread waited %.3f s on reads), I/O %.3f s "
                 "(busiest drive); bound max(compute, I/O) %.3f s = %.1f%% of the decode\n",
                 o.wall, o.compute, o.read_wait, o.io, o.bound, 100.0 * o.fraction);
    if (compute_starved(r.decode_cpu_seconds, o.compute))
      std::fprintf(stderr, "cpu       the compute thread ran %.3f s of the decode's %.3f s of compute (starved: the machine is busy)\n",
                   r.decode_cpu_seconds, o.compute);
  }
  for (size_t d = 0; d < s.drives.size(); ++d) {
    const DriveReport& dr = s.drives[d];
    std::fprintf(stderr, "drive %zu   %.4f GB in %" PRIu64 " reads, %.2f GB/s while busy (%.3f s)%s  %s\n", d,
                 dr.bytes / kGB, dr.reads, rate(dr.bytes / kGB, dr.busy_seconds), dr.busy_seconds,
                 dr.failed ? " FAILED" : "", dr.path.c_str());
  }
  std::fprintf(stderr,
               "memory    peak RSS %.4f GB = spine %.4f GB + expert memory peak %.4f GB (budget %.4f GB) + KV cache and state "
               "%.4f GB (%.1f KB a position) + rest\n",
               peak_rss_bytes() / kGB, engine.summary().spine_bytes / kGB, s.peak_cache_bytes / kGB,
               s.cache_budget_bytes / kGB, r.state_bytes / kGB, engine.summary().state_bytes_per_position / 1e3);
  const ModelSummary& m = engine.summary();
  std::fprintf(stderr,
               "budget    %.4f GB (%s): spine %.4f GB resident + %.4f GB streamed (%" PRIu64 " of %" PRIu64
               " units, window %.4f GB), experts %.4f GB, working %.4f GB; minimum %.4f GB\n",
               m.memory_budget / kGB, m.memory_source.c_str(), m.spine_resident_bytes / kGB, m.spine_streamed_bytes / kGB,
               m.spine_units_streamed, m.spine_units, m.spine_window_bytes / kGB, m.expert_budget_bytes / kGB,
               m.working_bytes / kGB, m.minimum_bytes / kGB);
  const uint64_t decode_spine = s.spine_bytes_read - r.at_decode_start.spine_bytes_read;
  // A verify pass reads the streamed spine once for all its positions: per committed token it
  // falls with acceptance.
  // Streamed spine bytes come from the placement's spine records where it has them, else from the
  // shards (a placement written before manifest v3, or none).
  std::fprintf(stderr,
               "spine     %.4f GB streamed in all (%.4f GB of it from spine records); %.4f GB per decode pass, %.4f GB per "
               "committed token\n",
               s.spine_bytes_read / kGB, s.spine_record_bytes_read / kGB, decode_passes ? decode_spine / kGB / decode_passes : 0.0,
               r.speculative.committed ? decode_spine / kGB / r.speculative.committed : 0.0);
  std::fprintf(stderr, "ids hash  %s (%zu ids)\n", ids_hash_text(r.generated).c_str(), r.generated.size());
}

std::string stats_json(const Engine& engine, const RunReport& r) {
  const EngineStats s = engine.stats();
  std::string drives;
  for (size_t d = 0; d < s.drives.size(); ++d) {
    const DriveReport& dr = s.drives[d];
    const DriveReport before = d < r.at_decode_start.drives.size() ? r.at_decode_start.drives[d] : DriveReport{};
    drives += fmt::format("{}\n    {{\"path\": {}, \"bytes\": {}, \"reads\": {}, \"errors\": {}, \"busy_seconds\": {:.6f}, "
                          "\"failed\": {}, \"decode_bytes\": {}, \"decode_busy_seconds\": {:.6f}}}",
                          d ? "," : "", json_string(dr.path), dr.bytes, dr.reads, dr.errors, dr.busy_seconds, dr.failed,
                          dr.bytes - before.bytes, dr.busy_seconds - before.busy_seconds);
  }
  const Overlap o = decode_overlap(r.at_decode_start, r.at_decode_end, r.decode_seconds);
  const std::string overlap = fmt::format(
      "{{\"decode_seconds\": {:.6f}, \"read_wait_seconds\": {:.6f}, \"compute_seconds\": {:.6f}, \"io_seconds\": {:.6f}, "
      "\"busiest_drive\": {}, \"bound_seconds\": {:.6f}, \"fraction\": {:.6f}, \"compute_cpu_seconds\": {:.6f}}}",
      o.wall, o.read_wait, o.compute, o.io, json_string(o.busiest), o.bound, o.fraction, r.decode_cpu_seconds);
  const std::string text = fmt::format(
      "{{\n  \"model\": {},\n  \"backend\": {},\n"
      "  \"prefill\": {{\"tokens\": {}, \"seconds\": {:.6f}, \"expert_bytes\": {}}},\n"
      "  \"decode\": {{\"tokens\": {}, \"seconds\": {:.6f}, \"expert_bytes\": {}}},\n"
      "  \"experts\": {{\"source\": {}, \"bytes_read\": {}, \"reads\": {}, \"hits\": {}, \"runs\": {}, \"selections\": {}, "
      "\"repeat_reads_in_pass\": {}, \"io_wait_seconds\": {:.6f}, \"decode_io_wait_seconds\": {:.6f}, \"prefetch_reads\": {}, \"prefetch_used\": {}, "
      "\"prefetch_bytes\": {}, \"prefetch_cancelled\": {}}},\n"
      "  \"device\": {{\"spine_seconds\": {:.6f}, \"expert_seconds\": {:.6f}, \"upload_seconds\": {:.6f}, "
      "\"upload_bytes\": {}, \"decode_spine_seconds\": {:.6f}, \"decode_expert_seconds\": {:.6f}, "
      "\"decode_upload_seconds\": {:.6f}, \"decode_upload_bytes\": {}}},\n"
      "  \"memory\": {{\"peak_rss\": {}, \"spine\": {}, \"expert_peak\": {}, \"budget\": {}, \"state\": {}, "
      "\"state_per_position\": {}, \"memory_budget\": {}, \"memory_source\": {}, \"spine_resident\": {}, "
      "\"spine_streamed\": {}, \"spine_window\": {}, \"minimum\": {}}},\n"
      "  \"spine\": {{\"bytes_read\": {}, \"decode_bytes_read\": {}, \"from_records\": {}}},\n"
      "  \"drives\": [{}\n  ],\n  \"overlap\": {},\n"
      "  \"speculative\": {{\"drafter\": {}, \"steps\": {}, \"verify_passes\": {}, \"drafted\": {}, \"accepted\": {}, "
      "\"committed\": {}, \"probes\": {}, \"draft_seconds\": {:.6f}, \"decode_expert_runs\": {}, \"moe_layers\": {}}},\n"
      "  \"ids_xxh3\": \"{:016x}\",\n  \"ids\": [{}]\n}}\n",
      json_string(engine.summary().architecture), json_string(engine.summary().backend), r.prefill_tokens, r.prefill_seconds,
      r.at_decode_start.expert_bytes_read, r.decode_tokens, r.decode_seconds,
      s.expert_bytes_read - r.at_decode_start.expert_bytes_read, json_string(s.expert_source), s.expert_bytes_read,
      s.expert_misses, s.expert_hits, s.expert_runs, s.expert_selections, s.repeat_reads_in_pass, s.io_wait_seconds,
      s.io_wait_seconds - r.at_decode_start.io_wait_seconds,
      s.prefetch_reads, s.prefetch_used, s.prefetch_bytes, s.prefetch_cancelled, s.device_spine_seconds, s.device_expert_seconds,
      s.device_upload_seconds, s.device_upload_bytes, s.device_spine_seconds - r.at_decode_start.device_spine_seconds,
      s.device_expert_seconds - r.at_decode_start.device_expert_seconds,
      s.device_upload_seconds - r.at_decode_start.device_upload_seconds,
      s.device_upload_bytes - r.at_decode_start.device_upload_bytes, peak_rss_bytes(), engine.summary().spine_bytes,
      s.peak_cache_bytes, s.cache_budget_bytes, r.state_bytes, engine.summary().state_bytes_per_position,
      engine.summary().memory_budget, json_string(engine.summary().memory_source), engine.summary().spine_resident_bytes,
      engine.summary().spine_streamed_bytes, engine.summary().spine_window_bytes, engine.summary().minimum_bytes,
      s.spine_bytes_read, s.spine_bytes_read - r.at_decode_start.spine_bytes_read, s.spine_record_bytes_read, drives, overlap, json_string(r.drafter), r.speculative.steps,
      r.speculative.verify_passes, r.speculative.drafted, r.speculative.accepted, r.speculative.committed,
      r.speculative.probes, r.speculative.draft_seconds, s.expert_runs - r.at_decode_start.expert_runs,
      engine.summary().moe_layers, ids_hash(r.generated), fmt::join(r.generated, ", "));
  return text;
}

}  // namespace deltafin::cli
