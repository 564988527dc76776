// The engines a generating command opens (run, serve): the target and, when --draft asks for
// one, the drafter with its own engine.
#include <filesystem>

#include "cli/commands.hpp"
#include "util/error.hpp"

namespace deltafin::cli {
namespace {

// The drafter --draft asks for: auto = the bundled draft when the bundled model is the target
// (or --draft-model when given), else none. Returns "off", "ngram", "model", "dspark" or "eagle3"
// (dir set).
std::string drafter_kind(const EngineOptions& engine, const std::string& draft, const std::string& draft_model,
                         int max_k, std::string& dir) {
  namespace fs = std::filesystem;
  std::string kind = draft;
  dir = draft_model;
  if (kind != "auto" && kind != "off" && kind != "model" && kind != "ngram" && kind != "dspark" && kind != "eagle3")
    fail("--draft: expected auto, off, model, ngram, dspark or eagle3 (got '{}')", kind);
  if (kind == "auto") {
    const fs::path target_dir = fs::weakly_canonical(engine.model_dir);
    const fs::path bundled = target_dir.parent_path() / "default-draft";
    if (dir.empty() && target_dir.filename() == "default" && fs::exists(bundled / "config.json")) dir = bundled.string();
    kind = dir.empty() ? "off" : "model";
  }
  if (max_k == 0) return "off";
  if ((kind == "model" || kind == "dspark" || kind == "eagle3") && dir.empty()) fail("--draft {} needs --draft-model DIR", kind);
  return kind;
}

}  // namespace

// DSpark and EAGLE-3 are built into the target's engine (EngineOptions::dspark_dir, eagle3_dir), which counts them in its
// plan. A draft model (when asked) is opened first and takes a quarter of the expert share (at most what
// all its experts take; a dense draft takes nothing); the target gets the rest, and everything the
// draft holds (spine, experts, KV cache, working memory) is part of the target's memory budget.
RunEngines open_engines(const EngineOptions& engine, const std::string& draft_flag, const std::string& draft_model,
                        int max_k, const SamplerOptions& sampler, int64_t positions) {
  std::string dir;
  const std::string kind = drafter_kind(engine, draft_flag, draft_model, max_k, dir);
  EngineOptions target = engine;
  target.positions = positions;
  if (kind == "dspark") target.dspark_dir = dir;
  if (kind == "eagle3") target.eagle3_dir = dir;
  std::unique_ptr<Engine> draft;
  if (kind == "model") {
    EngineOptions o = engine;
    o.model_dir = dir;
    o.placement = "";
    o.positions = positions;
    o.across_hosts = false;  // a draft runs on rank 0 alone
    o.record_routing = false;  // the trace is the target's
    // A quarter of --cache-gb, or of 4 GB without it; lowered, like a default, when memory is short.
    o.cache_gb = (engine.cache_gb_given ? engine.cache_gb : 4.0) / 4, o.cache_gb_given = false;
    draft = Engine::open(o);
    const uint64_t share = std::min(draft->stats().cache_budget_bytes, draft->summary().routed_expert_bytes);
    if (engine.cache_gb_given) target.cache_gb = std::max(0.0, engine.cache_gb - share / 1e9);
    target.reserved_bytes = draft->summary().footprint_bytes;
  }
  RunEngines e;
  e.target = Engine::open(target);
  if (draft) {
    e.draft_bytes = target.reserved_bytes;
    if (draft->summary().vocab_size != e.target->summary().vocab_size)
      fail("--draft-model {}: its vocabulary ({} tokens) differs from the target's ({}); a draft must share the tokenizer",
           dir, draft->summary().vocab_size, e.target->summary().vocab_size);
    e.drafter = make_model_drafter(std::move(draft), sampler);
  } else if (kind == "ngram") {
    e.drafter = make_ngram_drafter();
  } else if ((kind == "dspark" || kind == "eagle3") && e.target->summary().drafter_bytes > 0) {
    e.drafter = make_builtin_drafter(sampler, kind);
  }
  return e;
}

}  // namespace deltafin::cli
