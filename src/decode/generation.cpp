// The generation loop of run and serve (see generation.hpp).
#include "decode/generation.hpp"

#include <algorithm>
#include <limits>

#include "text/stop_strings.hpp"
#include "text/utf8_stream.hpp"

namespace deltafin {

std::vector<float> prefill_prompt(Session& session, std::span<const int32_t> prompt, int64_t from, int64_t chunk,
                                  const StopNow& stop_now, const std::function<void(int64_t)>& prefilled, int64_t& appended) {
  appended = 0;
  std::vector<float> logits;
  const size_t pass = static_cast<size_t>(std::max<int64_t>(chunk, 1));
  for (size_t done = static_cast<size_t>(from); done < prompt.size();) {
    if (stop_now && stop_now()) return {};
    const size_t n = std::min(pass, prompt.size() - done);
    logits = session.append(prompt.subspan(done, n), false);
    done += n;
    appended += static_cast<int64_t>(n);
    if (prefilled) prefilled(static_cast<int64_t>(done));
  }
  return logits;
}

GenerationOutcome run_generation(Session& session, int64_t vocab, Sampler& sampler, const GenerationRequest& request,
                                 const GenerationHooks& hooks) {
  using Clock = GenerationOutcome::Clock;
  GenerationOutcome out;
  auto stop_now = [&] { return hooks.stop_now && hooks.stop_now(); };
  const std::vector<float> logits =
      prefill_prompt(session, request.prompt, request.held, request.chunk, hooks.stop_now, hooks.prefilled, out.prefilled);
  if (hooks.decode_start) hooks.decode_start();

  Utf8Stream utf8;
  StopStrings stops(request.stops);
  bool delivered = true;  // false once the sink failed
  auto deliver = [&](const std::string& text) {
    if (!text.empty() && !hooks.text(text)) delivered = false;
  };
  // Takes one token; false once generation is over (stop token, stop string or max_tokens).
  auto take = [&](int32_t token) {
    if (std::find(request.stop_ids.begin(), request.stop_ids.end(), token) != request.stop_ids.end()) {
      out.finish = FinishReason::kStop;
      return false;
    }
    out.generated.push_back(token);
    if (request.tokenizer) {
      deliver(stops.push(utf8.push(request.tokenizer->token_bytes(token))));
      if (stops.stopped()) {
        out.finish = FinishReason::kStop;
        return false;
      }
    }
    if (hooks.token) hooks.token(token);
    return static_cast<int64_t>(out.generated.size()) < request.max_tokens;
  };

  // Under a constraint: the logits masked, sampled, and the token accepted; -1 when it left none.
  TokenConstraint* constraint = request.constraint;
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto pick = [&](std::vector<float> scores) -> int32_t {
    const auto t0 = Clock::now();
    constraint->mask(scores);
    ++out.constraint_steps;
    const bool none = std::none_of(scores.begin(), scores.end(), [](float s) { return s > -std::numeric_limits<float>::infinity(); });
    out.constraint_seconds += seconds_since(t0);
    if (none) return -1;
    const int32_t token = sampler.sample(scores);
    const auto t1 = Clock::now();
    constraint->accept(token);
    out.constraint_seconds += seconds_since(t1);
    return token;
  };
  // The constraint allows nothing more: the generation ends ("stop").
  auto constraint_done = [&] {
    if (!constraint || !constraint->finished()) return false;
    out.finish = FinishReason::kStop;
    return true;
  };

  SpeculativeDecoder decoder(session, request.drafter, sampler, vocab, request.speculative);
  std::vector<int32_t> context(request.prompt.begin(), request.prompt.end());
  std::vector<int32_t> committed_after_end;  // a step's tokens past the one that ended generation
  bool going = false;
  if (logits.empty()) {
    out.finish = FinishReason::kCancelled;
  } else if (request.max_tokens > 0) {
    if (stop_now()) {
      out.finish = FinishReason::kCancelled;
    } else {  // the first token comes from the prefill's logits
      const int32_t first = constraint ? pick(logits) : sampler.sample(logits);
      if (first < 0) {
        out.finish = FinishReason::kStop;
      } else {
        context.push_back(first);
        out.sampled_first = true;
        out.first_token_at = Clock::now();
        going = take(context.back()) && !constraint_done();
      }
    }
  }
  out.decode_from = Clock::now();
  SpeculativeStats plain;  // the steps under a constraint
  while (going) {
    if (!delivered || stop_now()) {
      out.finish = FinishReason::kCancelled;
      break;
    }
    if (constraint) {  // a plain step: the pending token scored, the next one picked under the constraint
      const auto t0 = Clock::now();
      std::vector<float> scores = session.append(std::span<const int32_t>(&context.back(), 1), false, PassKind::Decode);
      plain.target_seconds += seconds_since(t0);
      ++plain.steps, ++plain.committed;
      const int32_t token = pick(std::move(scores));
      if (token < 0) {
        out.finish = FinishReason::kStop;
        break;
      }
      context.push_back(token);
      going = take(token) && !constraint_done();
      continue;
    }
    for (int32_t token : decoder.step(context)) {
      if (!going) {
        committed_after_end.push_back(token);
        continue;
      }
      context.push_back(token);
      going = take(token);
    }
  }
  if (request.tokenizer) {
    deliver(stops.push(utf8.finish()));  // sequenced: the held-back tail comes last
    deliver(stops.finish());
  }
  context.insert(context.end(), committed_after_end.begin(), committed_after_end.end());
  out.committed = std::move(context);
  out.speculative = constraint ? plain : decoder.stats();
  return out;
}

}  // namespace deltafin
