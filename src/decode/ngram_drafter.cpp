// Prompt-lookup drafter (see drafter.hpp): finds the most recent earlier occurrence of the
// longest suffix of the context (kMaxMatch down to kMinMatch tokens) and proposes what followed.
#include <algorithm>

#include "decode/drafter.hpp"

namespace deltafin {
namespace {

class NgramDrafter final : public Drafter {
 public:
  static constexpr size_t kMinMatch = 2, kMaxMatch = 8;

  std::string name() const override { return "ngram"; }

  Draft propose(std::span<const int32_t> context, int k) override {
    Draft draft;
    const size_t n = context.size();
    for (size_t len = std::min(kMaxMatch, n > 0 ? n - 1 : 0); len >= kMinMatch; --len) {
      const auto suffix = context.subspan(n - len);
      for (size_t start = n - len; start-- > 0;) {  // most recent earlier occurrence first
        if (!std::equal(suffix.begin(), suffix.end(), context.begin() + static_cast<std::ptrdiff_t>(start))) continue;
        for (size_t i = start + len; i < n && static_cast<int>(draft.tokens.size()) < k; ++i)
          draft.tokens.push_back(context[i]);
        return draft;
      }
    }
    return draft;
  }
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter() { return std::make_unique<NgramDrafter>(); }

}  // namespace deltafin
