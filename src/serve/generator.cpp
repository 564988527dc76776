// Generation on the server's engine (see generator.hpp), by the loop of decode/generation.hpp.
#include "serve/generator.hpp"

#include <algorithm>
#include <chrono>

namespace deltafin::serve {

Generator::Generator(const std::string& model_dir, std::unique_ptr<Engine> engine, std::unique_ptr<Drafter> drafter,
                     const SpeculativeOptions& speculative, int64_t chunk, bool reuse_sessions,
                     std::unique_ptr<PrefixCache> prefix_cache)
    : engine_(std::move(engine)),
      drafter_(std::move(drafter)),
      speculative_(speculative),
      tokenizer_(load_tokenizer(model_dir)),
      chat_style_(detect_chat_style(*tokenizer_)),
      chat_stop_ids_(deltafin::chat_stop_ids(chat_style_, *tokenizer_)),
      chunk_(std::max<int64_t>(chunk, 1)),
      prefix_cache_(std::move(prefix_cache)),
      sessions_(*engine_, reuse_sessions, engine_->summary().planned_state_bytes, prefix_cache_.get()) {}

std::vector<int32_t> Generator::chat_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  return encode_segments(*tokenizer_, render_chat(chat_style_, messages, options));
}

std::vector<int32_t> Generator::end_ids(bool chat) const {
  std::vector<int32_t> ids = chat ? chat_stop_ids_ : std::vector<int32_t>{};
  if (engine_->summary().eos_token_id >= 0) ids.push_back(static_cast<int32_t>(engine_->summary().eos_token_id));
  return ids;
}

const TokenTrie& Generator::token_trie() {
  if (!token_trie_) token_trie_ = std::make_unique<TokenTrie>(*tokenizer_);
  return *token_trie_;
}

std::vector<int32_t> Generator::text_prompt(const std::string& text) const { return tokenizer_->encode(text, true); }

GenerationResult Generator::generate(const GenerationInput& in, const TextSink& sink, const StopNow& stop_now) {
  using Clock = std::chrono::steady_clock;
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(in.prompt.size());
  const auto t0 = Clock::now();
  r.reused_tokens = sessions_.take(in.prompt, r.prompt_tokens + in.max_tokens);
  Sampler sampler(in.sampler);
  GenerationRequest request;
  request.prompt = in.prompt;
  request.held = r.reused_tokens;
  request.chunk = chunk_;
  request.max_tokens = in.max_tokens;
  request.stop_ids = end_ids(in.chat);
  request.stops = in.stops;
  request.tokenizer = tokenizer_.get();
  request.drafter = sampler.greedy() ? drafter_.get() : nullptr;
  request.constraint = in.constraint;
  request.speculative = speculative_;
  bool delivered = true;  // false once the sink failed: the client is gone
  GenerationHooks hooks;
  hooks.text = [&](std::string_view text) {
    r.text += text;
    delivered = delivered && sink(text);
    return delivered;
  };
  hooks.stop_now = stop_now;
  // The prompt's state for the prefix cache: at its end, or (K3) first prefilled up to all but its
  // last position and saved there, the last position then run by the loop.
  const std::span<const int32_t> prompt(in.prompt);
  const int64_t save_at = sessions_.prompt_save_point(prompt);
  if (save_at == r.prompt_tokens) hooks.decode_start = [&] { sessions_.prompt_prefilled(prompt); };
  if (save_at > request.held && save_at < r.prompt_tokens) {
    int64_t appended = 0;
    prefill_prompt(sessions_.session(), prompt.first(static_cast<size_t>(save_at)), request.held, chunk_, stop_now, nullptr, appended);
    request.held = sessions_.session().position();
    sessions_.prompt_prefilled(prompt.first(static_cast<size_t>(save_at)));
  }
  const GenerationOutcome out = run_generation(sessions_.session(), engine_->summary().vocab_size, sampler, request, hooks);
  r.ids = out.generated;
  r.finish_reason = out.finish == FinishReason::kStop ? "stop" : out.finish == FinishReason::kCancelled ? "cancelled" : "length";
  if (out.sampled_first) r.first_token_seconds = std::chrono::duration<double>(out.first_token_at - t0).count();
  r.decode_seconds = std::chrono::duration<double>(Clock::now() - out.decode_from).count();
  r.decode_passes = static_cast<int64_t>(out.speculative.steps);
  r.constraint_seconds = out.constraint_seconds;
  r.constraint_steps = static_cast<int64_t>(out.constraint_steps);
  sessions_.record(out.committed);
  return r;
}

}  // namespace deltafin::serve
