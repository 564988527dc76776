// The vocabulary's byte trie for constrained sampling (see token_trie.hpp).
#include "text/token_trie.hpp"

#include <algorithm>

namespace deltafin {

TokenTrie::TokenTrie(const Tokenizer& tokenizer) {
  tokens_.resize(static_cast<size_t>(std::max(tokenizer.vocab_size(), 0)));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    std::string bytes = tokenizer.token_bytes(id);
    if (bytes.empty() || tokenizer.special_id(bytes) == id) continue;
    tokens_[static_cast<size_t>(id)] = std::move(bytes);
  }
  build();
}

TokenTrie::TokenTrie(std::vector<std::string> tokens) : tokens_(std::move(tokens)) { build(); }

void TokenTrie::build() {
  for (size_t id = 0; id < tokens_.size(); ++id)
    if (!tokens_[id].empty()) ids_.push_back(static_cast<int32_t>(id));
  std::sort(ids_.begin(), ids_.end(), [&](int32_t a, int32_t b) {
    return tokens_[static_cast<size_t>(a)] != tokens_[static_cast<size_t>(b)] ? tokens_[static_cast<size_t>(a)] < tokens_[static_cast<size_t>(b)] : a < b;
  });
  build_node(0, static_cast<uint32_t>(ids_.size()), 0, 0);
}

// ids_[lo, hi) share their first `depth` bytes (this node's prefix); the shortest (exactly the
// prefix) sort first, then the rest grouped by their next byte.
void TokenTrie::build_node(uint32_t lo, uint32_t hi, size_t depth, uint8_t byte) {
  const uint32_t self = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({0, lo, lo, byte});
  uint32_t i = lo;
  while (i < hi && tokens_[static_cast<size_t>(ids_[i])].size() == depth) ++i;
  nodes_[self].ids_end = i;
  while (i < hi) {
    const uint8_t next = static_cast<uint8_t>(tokens_[static_cast<size_t>(ids_[i])][depth]);
    uint32_t j = i;
    while (j < hi && static_cast<uint8_t>(tokens_[static_cast<size_t>(ids_[j])][depth]) == next) ++j;
    build_node(i, j, depth + 1, next);
    i = j;
  }
  nodes_[self].end = static_cast<uint32_t>(nodes_.size());
}

void TokenTrie::allowed(ByteMatcher& matcher, std::vector<uint8_t>& out) const {
  out.assign(tokens_.size(), 0);
  walk(0, matcher, out);
}

void TokenTrie::walk(uint32_t node, ByteMatcher& matcher, std::vector<uint8_t>& out) const {
  const Node& n = nodes_[node];
  for (uint32_t i = n.ids_begin; i < n.ids_end; ++i) out[static_cast<size_t>(ids_[i])] = 1;
  for (uint32_t child = node + 1; child < n.end; child = nodes_[child].end) {
    const size_t mark = matcher.mark();
    if (!matcher.push(nodes_[child].byte)) continue;
    walk(child, matcher, out);
    matcher.rewind(mark);
  }
}

}  // namespace deltafin
