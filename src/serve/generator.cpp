// Generation on the server's engine (see generator.hpp); the loop is cmd_run.cpp's.
#include "serve/generator.hpp"

#include <algorithm>
#include <chrono>

#include "text/stop_strings.hpp"
#include "text/utf8_stream.hpp"

namespace deltafin::serve {

Generator::Generator(const std::string& model_dir, std::unique_ptr<Engine> engine, std::unique_ptr<Drafter> drafter,
                     const SpeculativeOptions& speculative, int64_t chunk, bool reuse_sessions)
    : engine_(std::move(engine)),
      drafter_(std::move(drafter)),
      speculative_(speculative),
      tokenizer_(load_tokenizer(model_dir)),
      chat_style_(detect_chat_style(*tokenizer_)),
      chat_stop_ids_(chat_stop_ids(chat_style_, *tokenizer_)),
      sessions_(*engine_, chunk, reuse_sessions) {}

std::vector<int32_t> Generator::chat_prompt(const std::vector<ChatMessage>& messages) const {
  return encode_segments(*tokenizer_, render_chat(chat_style_, messages, true));
}

std::vector<int32_t> Generator::text_prompt(const std::string& text) const { return tokenizer_->encode(text, true); }

GenerationResult Generator::generate(const GenerationInput& in, const TextSink& sink, const StopNow& stop_now) {
  using Clock = std::chrono::steady_clock;
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(in.prompt.size());
  r.finish_reason = "length";
  std::vector<int32_t> stop_ids = in.chat ? chat_stop_ids_ : std::vector<int32_t>{};
  if (engine_->summary().eos_token_id >= 0) stop_ids.push_back(static_cast<int32_t>(engine_->summary().eos_token_id));
  Sampler sampler(in.sampler);
  Utf8Stream utf8;
  StopStrings stops(in.stops);
  bool delivered = true;  // false once the sink failed: the client is gone
  auto deliver = [&](const std::string& text) {
    if (text.empty()) return;
    r.text += text;
    delivered = delivered && sink(text);
  };
  // Takes one token; false once generation is over (stop token, stop string or max_tokens).
  auto take = [&](int32_t token) {
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      r.finish_reason = "stop";
      return false;
    }
    r.ids.push_back(token);
    deliver(stops.push(utf8.push(tokenizer_->token_bytes(token))));
    if (stops.stopped()) {
      r.finish_reason = "stop";
      return false;
    }
    return static_cast<int64_t>(r.ids.size()) < in.max_tokens;
  };

  const auto t0 = Clock::now();
  const std::vector<float> logits = sessions_.prefill(in.prompt, r.reused_tokens, stop_now);
  Drafter* drafter = sampler.greedy() ? drafter_.get() : nullptr;
  SpeculativeDecoder decoder(sessions_.session(), drafter, sampler, engine_->summary().vocab_size, speculative_);
  std::vector<int32_t> context = in.prompt;
  std::vector<int32_t> committed_after_stop;  // a step's tokens past the one that ended generation
  bool going = !logits.empty() && in.max_tokens > 0;
  if (logits.empty()) r.finish_reason = "cancelled";
  if (going) {  // the first token comes from the prefill's logits
    context.push_back(sampler.sample(logits));
    r.first_token_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    going = take(context.back());
  }
  const auto t1 = Clock::now();
  while (going) {
    if (!delivered || stop_now()) {
      r.finish_reason = "cancelled";
      break;
    }
    const std::vector<int32_t> step = decoder.step(context);
    for (size_t i = 0; i < step.size(); ++i) {
      if (!going) {
        committed_after_stop.push_back(step[i]);
        continue;
      }
      context.push_back(step[i]);
      going = take(step[i]);
    }
  }
  deliver(stops.push(utf8.finish()));  // sequenced: the held-back tail comes last
  deliver(stops.finish());
  r.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  r.decode_passes = static_cast<int64_t>(decoder.stats().steps);
  context.insert(context.end(), committed_after_stop.begin(), committed_after_stop.end());
  sessions_.record(context);
  return r;
}

}  // namespace deltafin::serve
