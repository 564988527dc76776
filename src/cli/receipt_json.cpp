// The receipt as JSON (--stats-json FILE): every figure of --stats=full, in bytes and seconds.
// decode.tokens counts tokens the decode produced (all generated but the first, which comes from
// the prefill's logits), decode.passes the target passes they took (fewer under speculation).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "cli/overlap.hpp"
#include "cli/receipt_format.hpp"
#include "util/ids_hash.hpp"
#include "util/json_string.hpp"
#include "util/memory.hpp"

namespace deltafin::cli {
namespace {

// --prefix-cache's figures ("" without one).
std::string prefix_cache_json(const RunReport& r) {
  if (r.prefix_hit < 0) return "";
  const PrefixCacheStats& p = r.prefix_cache;
  return fmt::format("  \"prefix_cache\": {{\"hit_positions\": {}, \"hits\": {}, \"positions_saved\": {}, \"saves\": {}, "
                     "\"bytes_written\": {}, \"evictions\": {}, \"ignored\": {}}},\n",
                     r.prefix_hit, p.hits, p.positions_saved, p.saves, p.bytes_written, p.evictions, p.ignored);
}

}  // namespace

std::string stats_json(const Engine& engine, const RunReport& r) {
  const EngineStats s = engine.stats();
  std::string drives;
  for (size_t d = 0; d < s.drives.size(); ++d) {
    const DriveReport& dr = s.drives[d];
    const DriveReport before = d < r.at_decode_start.drives.size() ? r.at_decode_start.drives[d] : DriveReport{};
    drives += fmt::format("{}\n    {{\"path\": {}, \"bytes\": {}, \"reads\": {}, \"errors\": {}, \"busy_seconds\": {:.6f}, "
                          "\"failed\": {}, \"bad_copies\": {}, \"decode_bytes\": {}, \"decode_busy_seconds\": {:.6f}}}",
                          d ? "," : "", json_string(dr.path), dr.bytes, dr.reads, dr.errors, dr.busy_seconds, dr.failed, dr.bad_copies,
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
      "  \"decode\": {{\"tokens\": {}, \"passes\": {}, \"seconds\": {:.6f}, \"expert_bytes\": {}, "
      "\"first_token_seconds\": {:.6f}}},\n"
      "  \"experts\": {{\"source\": {}, \"bytes_read\": {}, \"reads\": {}, \"hits\": {}, \"runs\": {}, \"selections\": {}, "
      "\"repeat_reads_in_pass\": {}, \"io_wait_seconds\": {:.6f}, \"decode_io_wait_seconds\": {:.6f}, \"prefetch_reads\": {}, \"prefetch_used\": {}, "
      "\"prefetch_bytes\": {}, \"prefetch_cancelled\": {}}},\n"
      "  \"device\": {{\"spine_seconds\": {:.6f}, \"expert_seconds\": {:.6f}, \"upload_seconds\": {:.6f}, "
      "\"upload_bytes\": {}, \"decode_spine_seconds\": {:.6f}, \"decode_expert_seconds\": {:.6f}, "
      "\"decode_upload_seconds\": {:.6f}, \"decode_upload_bytes\": {}}},\n"
      "  \"memory\": {{\"peak_rss\": {}, \"spine\": {}, \"expert_peak\": {}, \"budget\": {}, \"state\": {}, "
      "\"state_per_position\": {}, \"memory_budget\": {}, \"memory_source\": {}, \"spine_resident\": {}, "
      "\"spine_streamed\": {}, \"spine_window\": {}, \"minimum\": {}, \"device_memory_budget\": {}, \"spine_host\": {}}},\n"
      "  \"spine\": {{\"bytes_read\": {}, \"decode_bytes_read\": {}, \"from_records\": {}}},\n"
      "  \"drives\": [{}\n  ],\n  \"hosts\": [{}\n  ],\n  \"overlap\": {},\n"
      "  \"speculative\": {{\"drafter\": {}, \"steps\": {}, \"verify_passes\": {}, \"drafted\": {}, \"accepted\": {}, "
      "\"committed\": {}, \"probes\": {}, \"shadow_guesses\": {}, \"shadow_accepted\": {}, \"off\": {}, "
      "\"draft_seconds\": {:.6f}, \"decode_expert_runs\": {}, \"moe_layers\": {}}},\n"
      "{}  \"ids_xxh3\": \"{:016x}\",\n  \"ids\": [{}]\n}}\n",
      json_string(engine.summary().architecture), json_string(engine.summary().backend), r.prefill_tokens, r.prefill_seconds,
      r.at_decode_start.expert_bytes_read, r.decode_tokens, r.decode_passes, r.decode_seconds,
      s.expert_bytes_read - r.at_decode_start.expert_bytes_read, r.first_token_seconds, json_string(s.expert_source), s.expert_bytes_read,
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
      engine.summary().device_memory_budget, engine.summary().spine_host_bytes, s.spine_bytes_read, s.spine_bytes_read - r.at_decode_start.spine_bytes_read, s.spine_record_bytes_read, drives, hosts_json(s, r.at_decode_start), overlap, json_string(r.drafter), r.speculative.steps,
      r.speculative.verify_passes, r.speculative.drafted, r.speculative.accepted, r.speculative.committed,
      r.speculative.probes, r.speculative.shadow_guesses, r.speculative.shadow_accepted, r.speculative.off,
      r.speculative.draft_seconds, s.expert_runs - r.at_decode_start.expert_runs,
      engine.summary().moe_layers, prefix_cache_json(r), ids_hash(r.generated), fmt::join(r.generated, ", "));
  return text;
}

}  // namespace deltafin::cli
