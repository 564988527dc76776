// The masking step of constrained sampling, shared by every TokenConstraint that follows a
// ByteMatcher (structured output's JsonConstraint, a tool call's constraint): the logits of the
// tokens the matcher cannot take whole are set to -infinity, save for the special ids allowed at
// this point; and a sampled token's bytes are pushed into the matcher.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "text/byte_matcher.hpp"
#include "text/token_trie.hpp"

namespace deltafin {

// logits[id] = -inf for every id that is neither a token the matcher takes whole (from its state
// now, left as it was) nor in `also`. scratch: reused between calls. Returns the ids left.
size_t mask_by_matcher(const TokenTrie& trie, ByteMatcher& matcher, std::span<const int32_t> also,
                       std::vector<float>& logits, std::vector<uint8_t>& scratch);

// Pushes the token's bytes; false (and the matcher as it was) when it refuses one, or the token
// is not an ordinary one of the trie.
bool push_token(const TokenTrie& trie, ByteMatcher& matcher, int32_t token);

}  // namespace deltafin
