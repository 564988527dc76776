// The drafter built into the target's engine (see drafter.hpp): DSpark's block or an EAGLE-3
// head's chain of guesses from Session::draft_block, the pending token as its anchor. Greedy when the target decodes greedily
// (the argmax of each row); else each guess is drawn from the row's distribution under the
// target's sampling transform, with its own generator, and that distribution is reported (q) for
// the rejection rule.
#include "decode/drafter.hpp"

namespace deltafin {
namespace {

class BuiltInDrafter final : public Drafter {
 public:
  BuiltInDrafter(const SamplerOptions& sampling, std::string name) : sampler_(own_stream(sampling)), name_(std::move(name)) {}

  std::string name() const override { return name_; }
  void bind(Session& target) override { target_ = &target; }

  Draft propose(std::span<const int32_t> context, int k) override {
    Draft draft;
    if (!target_ || k <= 0 || context.empty() || target_->position() + 1 != static_cast<int64_t>(context.size()))
      return draft;
    const ChooseGuess choose = [&](std::span<const float> logits) {
      const std::vector<float> row(logits.begin(), logits.end());
      if (sampler_.greedy()) return sampler_.sample(row);
      draft.q.push_back(sampler_.distribution(row));
      return sampler_.draw(draft.q.back());
    };
    BlockDraft block = target_->draft_block(context.back(), k, choose);
    draft.tokens = std::move(block.tokens);
    draft.confidence = std::move(block.confidence);
    if (draft.tokens.empty()) draft.q.clear();
    return draft;
  }

 private:
  static SamplerOptions own_stream(SamplerOptions o) {
    o.seed = o.seed * 0x9E3779B97F4A7C15ull + 3;  // independent of the target's stream
    return o;
  }

  Session* target_ = nullptr;
  Sampler sampler_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Drafter> make_builtin_drafter(const SamplerOptions& sampling, const std::string& name) {
  return std::make_unique<BuiltInDrafter>(sampling, name);
}

}  // namespace deltafin
