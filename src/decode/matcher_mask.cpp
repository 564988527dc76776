// Masking logits by a ByteMatcher over the vocabulary's trie (see matcher_mask.hpp).
#include "decode/matcher_mask.hpp"

#include <algorithm>
#include <limits>

namespace deltafin {

size_t mask_by_matcher(const TokenTrie& trie, ByteMatcher& matcher, std::span<const int32_t> also,
                       std::vector<float>& logits, std::vector<uint8_t>& scratch) {
  trie.allowed(matcher, scratch);
  scratch.resize(std::max(scratch.size(), logits.size()), 0);
  for (int32_t id : also)
    if (id >= 0 && static_cast<size_t>(id) < scratch.size()) scratch[static_cast<size_t>(id)] = 1;
  size_t left = 0;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t id = 0; id < logits.size(); ++id) {
    if (scratch[id]) ++left;
    else logits[id] = kMasked;
  }
  return left;
}

bool push_token(const TokenTrie& trie, ByteMatcher& matcher, int32_t token) {
  if (token < 0 || token >= trie.vocab_size()) return false;
  const std::string& bytes = trie.bytes(token);
  if (bytes.empty()) return false;
  const size_t mark = matcher.mark();
  for (unsigned char c : bytes) {
    if (!matcher.push(c)) {
      matcher.rewind(mark);
      return false;
    }
  }
  return true;
}

}  // namespace deltafin
