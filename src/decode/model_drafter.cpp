// Draft-model drafter (see drafter.hpp). Its session caches the context it has seen: each call
// rewinds to the common prefix with the new context (the accepted guesses stay), feeds what is
// new, then decodes k guesses one position at a time. When it has fallen far behind (speculation
// was off for a while), it starts again from the last kRestart tokens instead of catching up on
// everything: a guess needs recent context, and guesses never change the output.
#include <algorithm>

#include "decode/drafter.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<Engine> engine, const SamplerOptions& sampling)
      : engine_(std::move(engine)), session_(engine_->new_session()), sampler_(draft_sampling(sampling)) {}

  std::string name() const override { return "model (" + engine_->summary().architecture + ")"; }

  static constexpr size_t kMaxCatchUp = 32, kRestart = 16;

  Draft propose(std::span<const int32_t> context, int k) override {
    Draft draft;
    if (k <= 0 || context.empty()) return draft;
    // Keep what the session already holds of this context (fed_ = context[base_ ...]); feed the rest.
    size_t common = 0;
    if (base_ <= context.size()) {
      const auto mine = context.subspan(base_);
      while (common < fed_.size() && common < mine.size() && fed_[common] == mine[common]) ++common;
    }
    if (base_ > context.size() || context.size() - base_ - common > kMaxCatchUp) {
      base_ = context.size() > kRestart ? context.size() - kRestart : 0;
      common = 0;
    }
    if (base_ + common == context.size()) --common;  // the last token's logits are needed: feed it again
    session_->rewind(static_cast<int64_t>(common));
    fed_.resize(common);
    const auto fresh = context.subspan(base_ + common);
    std::vector<float> logits = session_->append(fresh, false);
    fed_.insert(fed_.end(), fresh.begin(), fresh.end());
    for (int i = 0; i < k; ++i) {
      int32_t next;
      if (sampler_.greedy()) {
        next = sampler_.sample(logits);
      } else {
        draft.q.push_back(sampler_.distribution(logits));
        next = sampler_.draw(draft.q.back());
      }
      draft.tokens.push_back(next);
      if (i + 1 == k) break;
      logits = session_->append(std::span<const int32_t>(&next, 1), false);
      fed_.push_back(next);
    }
    return draft;
  }

 private:
  static SamplerOptions draft_sampling(SamplerOptions o) {
    o.seed = o.seed * 0x9E3779B97F4A7C15ull + 1;  // its own stream, independent of the target's
    return o;
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Session> session_;
  Sampler sampler_;
  std::vector<int32_t> fed_;  // tokens the session holds: context[base_ ...]
  size_t base_ = 0;
};

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(std::unique_ptr<Engine> draft, const SamplerOptions& sampling) {
  return std::make_unique<ModelDrafter>(std::move(draft), sampling);
}

}  // namespace deltafin
