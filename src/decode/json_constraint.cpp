// Structured output's constraint (see json_constraint.hpp).
#include "decode/json_constraint.hpp"

#include <algorithm>
#include <span>

#include "util/error.hpp"

namespace deltafin {

JsonConstraint::JsonConstraint(std::shared_ptr<const CompiledSchema> schema, const TokenTrie& trie, std::vector<int32_t> end_ids)
    : matcher_(std::move(schema)), trie_(trie), end_ids_(std::move(end_ids)) {}

void JsonConstraint::mask(std::vector<float>& logits) {
  const bool complete = matcher_.complete();
  mask_by_matcher(trie_, matcher_, complete ? std::span<const int32_t>(end_ids_) : std::span<const int32_t>(), logits, scratch_);
}

void JsonConstraint::accept(int32_t token) {
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end() && matcher_.complete()) {
    ended_ = true;
    return;
  }
  if (!push_token(trie_, matcher_, token)) fail("structured output: token {} cannot continue the JSON document", token);
}

bool JsonConstraint::finished() const { return ended_ || (end_ids_.empty() && matcher_.closed()); }

}  // namespace deltafin
