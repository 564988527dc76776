// The run receipt (--stats, to stderr): the lines a user asks for, in words and in units that fit
// the size. Prompt and answer speed with the time to first token, what speculation did, how much
// was read from disk and how fast (each drive's share when there are several), whether a busy
// machine starved the compute thread, and whether the memory budget held. --stats=full adds the
// engine's counters (receipt_counters.cpp); --stats-json writes every figure (receipt_json.cpp).
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "cli/compute_starvation.hpp"
#include "cli/overlap.hpp"
#include "cli/receipt_format.hpp"
#include "util/memory.hpp"

namespace deltafin::cli {
namespace {

void line(const char* label, const std::string& text) { std::fprintf(stderr, "%-9s %s\n", label, text.c_str()); }

std::string tokens(int64_t n) { return fmt::format("{} token{}", n, n == 1 ? "" : "s"); }

// With the passes it took and the experts it read against the union it routed to (1.00: each
// routed expert read once).
std::string prompt_line(const RunReport& r, const ModelSummary& m) {
  if (r.prefill_tokens == 0) return "no tokens";
  std::string text = fmt::format("{} in {}: {} tok/s", tokens(r.prefill_tokens), human_seconds(r.prefill_seconds),
                                 human_amount(r.prefill_tokens / std::max(r.prefill_seconds, 1e-9)));
  const EngineStats& at = r.at_decode_start;
  text += fmt::format("; {} pass{} of at most {} positions", at.passes, at.passes == 1 ? "" : "es", m.pass_positions);
  if (at.union_expert_bytes)
    text += fmt::format("; experts read {:.2f}x the {} it routed to", prefill_read_over_union(at), human_bytes(at.union_expert_bytes));
  return text;
}

// The first token comes from the prompt's pass; the rate counts the tokens after it.
std::string answer_line(const RunReport& r) {
  const auto n = static_cast<int64_t>(r.generated.size());
  if (n == 0) return "no tokens";
  std::string text = tokens(n);
  if (r.decode_tokens > 0 && r.decode_seconds > 0)
    text += fmt::format(" at {} tok/s", human_amount(r.decode_tokens / r.decode_seconds));
  return text + fmt::format("; first token after {}", human_seconds(r.first_token_seconds));
}

// Speculation in words: what the drafter guessed and what it bought, or why it guessed nothing.
std::string draft_line(const RunReport& r) {
  const SpeculativeStats& sp = r.speculative;
  const std::string who = r.drafter.starts_with("model") ? "the draft model"
                          : r.drafter == "dspark"        ? "DSpark (--draft dspark)"
                          : r.drafter == "eagle3"        ? "the EAGLE-3 head (--draft eagle3)"
                                                         : "prompt lookup (--draft ngram)";
  if (sp.drafted > 0) {
    std::string text = fmt::format("{} guessed {}, {} accepted: {} tokens per pass of the model", who,
                                   tokens(static_cast<int64_t>(sp.drafted)), sp.accepted,
                                   human_amount(static_cast<double>(sp.committed) / std::max<uint64_t>(sp.steps, 1)));
    if (sp.off) text += "; then speculation turned itself off (the guesses stopped paying)";
    return text;
  }
  if (sp.off)
    return fmt::format("speculation turned itself off: {}'s guesses, checked on the side, were right {} of {} times, "
                       "not enough to pay for drafting and wider passes; every pass decoded one token",
                       who, sp.shadow_accepted, sp.shadow_guesses);
  if (sp.shadow_guesses > 0)
    return fmt::format("{} was still being measured ({} of {} guesses right, checked on the side): no pass used its "
                       "guesses", who, sp.shadow_accepted, sp.shadow_guesses);
  return who + " made no guesses";
}

// Bytes read from storage (experts, and the spine where it streams) over the busiest drive's
// busy time: the rate the drives delivered while reading.
void print_disk(const EngineStats& s, bool page_cache, bool full) {
  const uint64_t bytes = s.expert_bytes_read + s.spine_bytes_read;
  if (bytes == 0) return line("disk", "nothing read: every expert needed was already in memory");
  double busy = s.spine_drive_busy_seconds;
  for (const DriveReport& d : s.drives) busy = std::max(busy, d.busy_seconds);
  std::string text = human_bytes(bytes) + " read";
  if (s.spine_bytes_read > 0)
    text += fmt::format(" ({} experts, {} streamed spine)", human_bytes(s.expert_bytes_read), human_bytes(s.spine_bytes_read));
  if (busy > 0) text += " at " + human_byte_rate(bytes / busy);
  if (s.drives.size() > 1) text += fmt::format(" from {} drives", s.drives.size());
  if (page_cache) text += " (--no-bypass: through the page cache, so perhaps from memory)";
  line("disk", text);
  if (full) return;  // --stats=full has a line per drive of its own
  for (size_t d = 0; d < s.drives.size(); ++d) {
    const DriveReport& dr = s.drives[d];
    if (s.drives.size() < 2 && !dr.failed && !dr.bad_copies) continue;  // one healthy drive: the disk line says it all
    std::fprintf(stderr, "  drive %zu %s%s%s%s  %s\n", d, human_bytes(dr.bytes).c_str(),
                 dr.busy_seconds > 0 ? (" at " + human_byte_rate(dr.bytes / dr.busy_seconds)).c_str() : "",
                 dr.failed ? " FAILED" : "",
                 dr.bad_copies ? fmt::format(", {} bad copies (read again from another drive)", dr.bad_copies).c_str() : "",
                 dr.path.c_str());
  }
}

std::string memory_line(const ModelSummary& m, const std::string& drafter) {
  const uint64_t peak = peak_rss_bytes();
  std::string text = fmt::format("peak {}, budget {} ({}): ", human_bytes(peak), human_bytes(m.memory_budget),
                                 m.memory_source);
  text += peak <= m.memory_budget ? "held" : "exceeded by " + human_bytes(peak - m.memory_budget);
  if (m.drafter_bytes > 0)
    text += fmt::format("; the {} holds {} of weights in it", drafter == "eagle3" ? "EAGLE-3 head" : "DSpark drafter",
                        human_bytes(m.drafter_bytes));
  if (m.spine_streamed_bytes > 0)
    text += fmt::format("; {} of the weights did not fit and stream from disk every pass", human_bytes(m.spine_streamed_bytes));
  return text;
}

// --prefix-cache: what the prompt found, and what was written.
std::string prefix_line(const RunReport& r) {
  const PrefixCacheStats& p = r.prefix_cache;
  std::string text = r.prefix_hit > 0 ? fmt::format("hit {} positions (not prefilled again)", r.prefix_hit)
                                      : std::string("no saved prefix of this prompt");
  text += p.saves == 0 ? std::string("; nothing new to save")
                       : fmt::format("; saved {} entr{} ({})", p.saves, p.saves == 1 ? "y" : "ies", human_bytes(p.bytes_written));
  if (p.evictions > 0) text += fmt::format(", {} evicted for the budget", p.evictions);
  if (p.ignored > 0) text += fmt::format("; {} damaged or foreign entr{} ignored", p.ignored, p.ignored == 1 ? "y" : "ies");
  return text;
}

}  // namespace

void print_receipt(const Engine& engine, const RunReport& r, bool full) {
  const EngineStats s = engine.stats();
  const ModelSummary& m = engine.summary();
  std::fprintf(stderr, "--- deltafin receipt%s ---\n", full ? "" : " (--stats=full: every counter)");
  line("model", m.architecture + " on " + m.backend);
  line("prompt", prompt_line(r, m));
  if (r.prefix_hit >= 0) line("prefix", prefix_line(r));
  line("answer", answer_line(r));
  if (r.drafter != "off") line("draft", draft_line(r));
  print_disk(s, r.page_cache, full);
  print_hosts(s);
  // Findings about how the run went (one line each) go here, above the memory line.
  if (r.decode_tokens > 0) {
    const Overlap o = decode_overlap(r.at_decode_start, r.at_decode_end, r.decode_seconds);
    if (compute_starved(r.decode_cpu_seconds, o.compute))
      line("cpu", fmt::format("the compute thread ran {} of the decode's {} of compute (starved: the machine is busy)",
                              human_seconds(r.decode_cpu_seconds), human_seconds(o.compute)));
  }
  line("memory", memory_line(m, r.drafter));
  if (full) print_engine_counters(engine, r);
}

}  // namespace deltafin::cli
