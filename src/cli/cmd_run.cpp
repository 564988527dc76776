// `deltafin run`: a prompt (-p TEXT, a file, stdin, or --tokens ids; one trailing newline is
// dropped from every text prompt, so `echo TEXT |`, a file and -p TEXT agree), optionally in the model's
// chat format, prefilled in passes the memory plan sizes (at most --chunk positions), then decoded (speculatively when a
// drafter is on: the target checks every guess, so the output is plain decoding's) and streamed
// to stdout as UTF-8-safe text (or ids with --ids), by the generation loop serve shares
// (decode/generation.hpp). Ctrl-C stops cleanly; --stats
// (--stats=full: every counter) prints the receipt to stderr either way. With --prefix-cache the
// longest saved prefix of the prompt is loaded first and the state is saved at the prompt's save
// point (decode/prefix_cache.hpp; written while the rest runs) and after the answer. With
// --chat --tools FILE the reply is printed split (run_tools.hpp).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <string_view>

#include "cli/commands.hpp"
#include "cli/compute_starvation.hpp"
#include "cli/prefix_cache_flags.hpp"
#include "cli/progress.hpp"
#include "cli/run_tools.hpp"
#include "decode/drafter.hpp"
#include "decode/generation.hpp"
#include "decode/sampler.hpp"
#include "text/chat_format.hpp"
#include "text/tokenizer.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

namespace deltafin::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

struct RunFlags {
  EngineOptions engine;
  std::string prompt, prompt_file, tokens, system, stats_json, record_usage, record_routing, stats_level, tools_file, tool_choice = "auto";
  bool prompt_given = false, chat = false, ids = false, stats = false, ignore_eos = false, past_context = false;
  int64_t max_new = 256;
  SamplerOptions sampler;
  std::vector<std::string> stops;
  std::string draft = "auto", draft_model;
  SpeculativeOptions speculative;
  PrefixCacheFlags prefix_cache;
};

std::string read_prompt_text(const RunFlags& f) {
  if (!f.prompt_file.empty()) return read_input_file(f.prompt_file, "the prompt file (-f)");
  if (f.prompt_given && f.prompt != "-") return f.prompt;
  std::string text(std::istreambuf_iterator<char>(std::cin), {});
  if (std::cin.bad()) fail("stdin: read error");
  return text;
}

// The one rule for every text prompt (-p, -f, stdin; plain or --chat): one trailing line ending
// ("\n" or "\r\n") is not part of it. `echo TEXT |`, a file an editor saved and -p TEXT then give
// the same prompt; a prompt that must end in a newline ends in two.
void drop_trailing_newline(std::string& text) {
  if (text.ends_with("\r\n")) text.resize(text.size() - 2);
  else if (text.ends_with('\n')) text.pop_back();
}

int run(const RunFlags& f) {
  using Clock = std::chrono::steady_clock;
  if (f.max_new < 0) fail("-n: must be >= 0 (got {})", f.max_new);
  if (f.max_new > 1'000'000'000'000) fail("-n: too large (at most 10^12 tokens)");
  if (f.speculative.max_k < 0 || f.speculative.max_k > 16)
    fail("--draft-k must be 0..16 (0: no drafts; got {})", f.speculative.max_k);
  Sampler sampler(f.sampler);
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> prompt;
  std::vector<int32_t> stop_ids;
  std::unique_ptr<RunTools> tools;
  if (!f.tools_file.empty() && !f.chat) fail("--tools needs --chat");
  if (!f.tools_file.empty() && f.ids) fail("--tools prints the reply split into answer and tool calls: not with --ids");
  if (f.tool_choice != "auto" && f.tools_file.empty()) fail("--tool-choice needs --tools FILE");
  if (!f.tokens.empty()) {
    if (f.chat) fail("--chat needs a text prompt, not --tokens");
    prompt = parse_token_list(f.tokens, "--tokens");
  } else {
    tokenizer = load_tokenizer(f.engine.model_dir);
    std::string text = read_prompt_text(f);
    drop_trailing_newline(text);
    if (text.empty()) fail("the prompt is empty: pass -p TEXT, a file with -f, or text on stdin");
    if (f.chat) {
      const ChatStyle style = detect_chat_style(*tokenizer);
      std::vector<ChatMessage> messages;
      if (!f.system.empty()) messages.push_back({"system", f.system});
      messages.push_back({"user", text});
      if (!f.tools_file.empty()) {
        tools = std::make_unique<RunTools>(f.tools_file, f.tool_choice, messages, style);
        prompt = tools->prompt(*tokenizer);
      } else {
        prompt = encode_segments(*tokenizer, render_chat(style, messages, true));
      }
      stop_ids = chat_stop_ids(style, *tokenizer);
    } else {
      prompt = tokenizer->encode(text, true);
    }
  }
  if (!f.ids && !tokenizer) fail("--tokens prompts print ids: add --ids (no tokenizer is loaded)");
  if (!f.stops.empty() && !tokenizer) tokenizer = load_tokenizer(f.engine.model_dir);  // --stop reads the text

  // Outputs are opened before the run, so a wrong directory fails at once.
  std::unique_ptr<OutputFile> stats_out, usage_out, routing_out;
  if (!f.stats_json.empty()) stats_out = std::make_unique<OutputFile>(f.stats_json);
  if (!f.record_usage.empty()) usage_out = std::make_unique<OutputFile>(f.record_usage);
  if (!f.record_routing.empty()) routing_out = std::make_unique<OutputFile>(f.record_routing);
  check_prefix_cache_flags(f.prefix_cache);
  const int64_t needed = static_cast<int64_t>(prompt.size()) + f.max_new;
  RunEngines engines = open_engines(f.engine, f.draft, f.draft_model, f.speculative.max_k, f.sampler, needed);
  std::unique_ptr<Engine>& engine = engines.target;
  std::unique_ptr<Drafter>& drafter = engines.drafter;
  const int64_t context_length = engine->summary().context_length;
  if (context_length > 0 && needed > context_length && !f.past_context)
    fail("the prompt ({} tokens) and -n {} need {} positions, past the model's context of {} "
         "(max_position_embeddings): shorten them, or pass --past-context",
         prompt.size(), f.max_new, needed, context_length);
  if (engine->summary().eos_token_id >= 0) stop_ids.push_back(static_cast<int32_t>(engine->summary().eos_token_id));
  if (f.ignore_eos) stop_ids.clear();
  auto session = engine->new_session();
  std::unique_ptr<PrefixCache> prefix_cache = open_prefix_cache(f.prefix_cache, *engine);
  g_interrupted = 0;
  std::signal(SIGINT, on_sigint);

  auto emit = [](std::string_view s) {  // stops the run at the first failed write
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    check_stdout();
  };
  GenerationRequest request;
  request.prompt = prompt;
  request.chunk = engine->summary().pass_positions;
  request.max_tokens = f.max_new;
  request.stop_ids = stop_ids;
  request.stops = f.stops;
  if (tools) {
    request.stops.insert(request.stops.end(), tools->stops().begin(), tools->stops().end());
    request.constraint = tools->constraint(*tokenizer, stop_ids);
  }
  // --ids prints no text; with --stop the text is still read, for the stop strings.
  request.tokenizer = !f.ids || !f.stops.empty() ? tokenizer.get() : nullptr;
  request.drafter = drafter.get();
  request.speculative = f.speculative;
  RunReport report;
  const auto t0 = Clock::now();
  if (prefix_cache) request.held = report.prefix_hit = prefix_cache->restore(*session, prompt);
  // The prompt's state at its save point, written while the rest runs.
  const int64_t save_at = prefix_cache ? prefix_cache->prompt_save_point(prompt) : 0;
  std::future<void> prompt_saved;
  auto save_prompt = [&] {
    const std::span<const int32_t> held = std::span<const int32_t>(prompt).first(static_cast<size_t>(save_at));
    if (session->position() == save_at && !prefix_cache->saved(held))
      prompt_saved = std::async(std::launch::async, [&, held, state = session->save_state()] { prefix_cache->save(held, state); });
  };
  Progress progress("prefill", static_cast<int64_t>(prompt.size()));
  Clock::time_point t1;
  double cpu1 = 0;
  GenerationHooks hooks;
  hooks.stop_now = [] { return g_interrupted != 0; };
  hooks.prefilled = [&](int64_t position) { progress.update(position); };
  hooks.decode_start = [&] {
    if (prefix_cache && save_at == static_cast<int64_t>(prompt.size())) save_prompt();
    progress.finish();
    t1 = Clock::now();
    cpu1 = thread_cpu_seconds();
    report.at_decode_start = engine->stats();
  };
  if (f.ids) {  // the ids, space-separated; the token that completes a stop string is not printed
    hooks.text = [](std::string_view) { return true; };
    hooks.token = [&, printed = int64_t{0}](int32_t token) mutable {
      emit((printed++ > 0 ? " " : "") + std::to_string(token));
    };
  } else if (tools) {
    hooks.text = [&](std::string_view text) {
      tools->take(text, emit);
      return true;
    };
  } else {
    hooks.text = [&](std::string_view text) {
      emit(text);
      return true;
    };
  }
  int64_t prefilled_to_save = 0;  // K3: the prompt up to its save point first, the last position then in the loop
  if (prefix_cache && save_at > request.held && save_at < static_cast<int64_t>(prompt.size())) {
    prefill_prompt(*session, std::span<const int32_t>(prompt).first(static_cast<size_t>(save_at)), request.held,
                   request.chunk, hooks.stop_now, hooks.prefilled, prefilled_to_save);
    request.held = session->position();
    save_prompt();
  }
  const GenerationOutcome out = run_generation(*session, engine->summary().vocab_size, sampler, request, hooks);
  if (tools) tools->finish(emit);
  emit("\n");
  if (prefix_cache) {
    if (prompt_saved.valid()) prompt_saved.get();
    prefix_cache->save(*session, std::span<const int32_t>(out.committed).first(static_cast<size_t>(session->position())));
    report.prefix_cache = prefix_cache->stats();
  }
  report.generated = out.generated;
  report.at_decode_end = engine->stats();
  const auto t2 = Clock::now();
  report.decode_cpu_seconds = thread_cpu_seconds() - cpu1;
  std::signal(SIGINT, SIG_DFL);
  if (g_interrupted) std::fprintf(stderr, "deltafin: interrupted\n");
  report.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  report.prefill_tokens = prefilled_to_save + out.prefilled;
  report.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  // The first token comes from the prefill's logits; the decode produced the rest (tokens, not
  // passes: a speculative pass may commit several).
  report.decode_tokens = out.generated.empty() ? 0 : static_cast<int64_t>(out.generated.size()) - 1;
  report.decode_passes = static_cast<int64_t>(out.speculative.steps);
  // From the start of the prefill to the first token (0 when the first was a stop token).
  report.first_token_seconds =
      out.generated.empty() ? 0 : std::chrono::duration<double>(out.first_token_at - t0).count();
  report.speculative = out.speculative;
  report.drafter = drafter ? drafter->name() : "off";
  report.state_bytes = session->state_bytes();
  report.page_cache = !f.engine.bypass;
  if (f.stats) print_receipt(*engine, report, f.stats_level == "full");
  if (stats_out) stats_out->write(stats_json(*engine, report));
  if (usage_out) usage_out->write(engine->usage_json());
  if (routing_out) routing_out->write(engine->routing_trace());
  return g_interrupted ? 130 : 0;
}

}  // namespace

Command register_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* sub = app.add_subcommand("run", "Generate a continuation of a prompt (text on stdin when -p is absent)");
  add_engine_flags(*sub, f->engine);
  auto* p = sub->add_option("-p,--prompt", f->prompt,
                            "Prompt text ('-' or absent: read stdin). One trailing newline is dropped from every prompt "
                            "(-p, -f, stdin), so `echo TEXT |` and -p TEXT agree");
  sub->add_option("-f,--file", f->prompt_file, "Read the prompt from a file (its one trailing newline dropped)");
  sub->add_option("--tokens", f->tokens, "Prompt as comma-separated token ids instead of text");
  sub->add_flag("--chat", f->chat, "Wrap the prompt in the model's chat format");
  sub->add_option("--system", f->system, "System message (with --chat)");
  sub->add_option("--tools", f->tools_file,
                  "Declare these tools (a JSON file in OpenAI's `tools` form; with --chat): the reply's tool calls are "
                  "printed as JSON lines after the answer, its reasoning on stderr");
  sub->add_option("--tool-choice", f->tool_choice, "With --tools: auto, none, required, or a function's name (a forced call)")
      ->capture_default_str();
  sub->add_option("-n,--max-new-tokens", f->max_new, "New tokens at most")->capture_default_str();
  sub->add_option("--temp", f->sampler.temperature, "Sampling temperature (0: greedy)")->capture_default_str();
  sub->add_option("--top-k", f->sampler.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  sub->add_option("--top-p", f->sampler.top_p, "Nucleus sampling threshold (1: off)")->capture_default_str();
  sub->add_option("--min-p", f->sampler.min_p, "Drop tokens below min-p x the top probability (0: off)")->capture_default_str();
  sub->add_option("--seed", f->sampler.seed, "Seed of the sampler (0 .. 2^64 - 1)")
      ->check(CLI::Validator(  // an unsigned flag would wrap "-1"; CLI11's range check prints 1e308
          [](std::string& s) { return s.find('-') != std::string::npos ? std::string("must not be negative") : std::string(); },
          "", "SEED"))
      ->capture_default_str();
  sub->add_option("--stop", f->stops, "Stop when the output contains this text (repeatable)");
  sub->add_flag("--ids", f->ids, "Print generated token ids, space-separated, on one line");
  sub->add_flag("--ignore-eos", f->ignore_eos, "Do not stop at end-of-sequence or end-of-turn tokens");
  sub->add_option("--draft", f->draft,
                  "Speculative drafter: auto (the bundled draft for the bundled model), off, model, ngram, dspark (Kimi K3's DSpark), eagle3 (an EAGLE-3 head for K3)")
      ->capture_default_str();
  sub->add_option("--draft-model", f->draft_model, "Draft model directory (shares the target's tokenizer), or the DSpark drafter's / EAGLE-3 head's with --draft dspark / eagle3");
  sub->add_option("--draft-k", f->speculative.max_k, "Most guesses per target pass")->capture_default_str();
  sub->add_flag_callback("--no-adaptive", [f] { f->speculative.adaptive = false; },
                         "Always draft --draft-k guesses (no cost model)");
  sub->add_flag("--past-context", f->past_context,
                "Allow the prompt + -n past the model's context (max_position_embeddings); quality there is undefined");
  auto* stats = sub->add_option("--stats", f->stats_level,
                                 "Print the receipt to stderr: speed, disk reads, memory; --stats=full adds every counter")
                     ->expected(0, 1)
                     ->type_name("")
                     ->check(CLI::Validator(
                         [](std::string& s) { return s.empty() || s == "full" ? std::string() : std::string("--stats or --stats=full"); },
                         "", ""));
  sub->add_option("--stats-json", f->stats_json, "Write the receipt as JSON to this file");
  add_prefix_cache_flags(*sub, f->prefix_cache);
  sub->add_option("--record-usage", f->record_usage,
                  "Write how often each expert was used to this file (input of `deltafin place --usage`)");
  sub->add_option("--record-routing", f->record_routing,
                  "Write every pass's routed-expert choices to this file (docs/routing-traces.md; input of the cache simulator)");
  return {sub, [f, p, stats] {
            f->prompt_given = p->count() > 0;
            f->stats = stats->count() > 0;
            f->engine.model_dir = model_dir_or_default(f->engine.model_dir);
            f->engine.record_routing = !f->record_routing.empty();
            if (expert_host_rank()) return serve_expert_host(f->engine);
            return run(*f);
          }};
}

}  // namespace deltafin::cli
