// The vocabulary's byte trie for constrained sampling (see token_trie.hpp).
#include "text/token_trie.hpp"

#include <algorithm>

#include "text/utf8.hpp"

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

namespace {

// The characters of a token that is ordinary text inside a JSON string (whole UTF-8 characters,
// no '"', '\\' or control bytes), else kNotText.
uint32_t text_chars(const std::string& bytes, uint32_t not_text) {
  uint32_t chars = 0;
  for (size_t i = 0; i < bytes.size();) {
    const auto* s = reinterpret_cast<const unsigned char*>(bytes.data() + i);
    if (*s < 0x20 || *s == '"' || *s == '\\') return not_text;
    const int len = utf8::sequence_length(s, bytes.size() - i);
    if (len <= 0) return not_text;
    i += static_cast<size_t>(len);
    ++chars;
  }
  return chars;
}

}  // namespace

// ids_[lo, hi) share their first `depth` bytes (this node's prefix); the shortest (exactly the
// prefix) sort first, then the rest grouped by their next byte.
void TokenTrie::build_node(uint32_t lo, uint32_t hi, size_t depth, uint8_t byte) {
  const uint32_t self = static_cast<uint32_t>(nodes_.size());
  Node node;
  node.ids_begin = node.ids_end = lo;
  node.byte = byte;
  nodes_.push_back(node);
  uint32_t i = lo;
  while (i < hi && tokens_[static_cast<size_t>(ids_[i])].size() == depth) ++i;
  nodes_[self].ids_end = i;
  uint32_t max_chars = 0;
  for (uint32_t k = lo; k < i; ++k) max_chars = std::max(max_chars, text_chars(tokens_[static_cast<size_t>(ids_[k])], kNotText));
  while (i < hi) {
    const uint8_t next = static_cast<uint8_t>(tokens_[static_cast<size_t>(ids_[i])][depth]);
    uint32_t j = i;
    while (j < hi && static_cast<uint8_t>(tokens_[static_cast<size_t>(ids_[j])][depth]) == next) ++j;
    const uint32_t child = static_cast<uint32_t>(nodes_.size());
    build_node(i, j, depth + 1, next);
    max_chars = std::max(max_chars, nodes_[child].max_chars);
    i = j;
  }
  nodes_[self].end = static_cast<uint32_t>(nodes_.size());
  nodes_[self].subtree_ids_end = hi;
  nodes_[self].max_chars = max_chars;
}

void TokenTrie::allowed(ByteMatcher& matcher, std::vector<uint8_t>& out) const {
  out.assign(tokens_.size(), 0);
  walk(0, matcher, out);
}

void TokenTrie::walk(uint32_t node, ByteMatcher& matcher, std::vector<uint8_t>& out) const {
  const Node& n = nodes_[node];
  for (uint32_t i = n.ids_begin; i < n.ids_end; ++i) out[static_cast<size_t>(ids_[i])] = 1;
  const uint32_t free_text = matcher.free_text();
  for (uint32_t child = node + 1; child < n.end; child = nodes_[child].end) {
    const Node& c = nodes_[child];
    // All of it text the matcher takes (counting the token's characters before this node too: conservative).
    if (free_text > 0 && c.max_chars != kNotText && c.max_chars <= free_text) {
      for (uint32_t i = c.ids_begin; i < c.subtree_ids_end; ++i) out[static_cast<size_t>(ids_[i])] = 1;
      continue;
    }
    const size_t mark = matcher.mark();
    if (!matcher.push(nodes_[child].byte)) continue;
    walk(child, matcher, out);
    matcher.rewind(mark);
  }
}

}  // namespace deltafin
