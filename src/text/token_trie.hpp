// The ordinary tokens of a vocabulary (special tokens excluded) as a byte trie, built once per
// tokenizer, for constrained sampling: allowed() walks it depth-first under a ByteMatcher,
// pushing each edge's byte and rewinding after the subtree, pruned at the first refused byte, and
// marks every token whose whole byte string the matcher takes. Where the matcher is in free text
// (ByteMatcher::free_text, e.g. inside a JSON string), a subtree whose tokens are all ordinary
// text no longer than what it takes is marked whole, without pushing a byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/byte_matcher.hpp"
#include "text/tokenizer.hpp"

namespace deltafin {

class TokenTrie {
 public:
  // Every id below vocab_size() whose bytes are not empty and not a special (or added) token's text.
  explicit TokenTrie(const Tokenizer& tokenizer);
  // tokens[id]: its bytes; empty ones are left out.
  explicit TokenTrie(std::vector<std::string> tokens);

  // out: resized to vocab_size(), 1 for each token the matcher takes whole (from its state now,
  // which is left as it was), else 0.
  void allowed(ByteMatcher& matcher, std::vector<uint8_t>& out) const;
  // The bytes of a token ("" for one left out).
  const std::string& bytes(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  size_t nodes() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t end = 0;            // one past its subtree (nodes are in depth-first order)
    uint32_t ids_begin = 0, ids_end = 0;  // the tokens that end here (into ids_)
    uint32_t subtree_ids_end = 0;  // the tokens of its subtree: ids_[ids_begin, subtree_ids_end)
    uint32_t max_chars = 0;        // the most characters of a token in its subtree; kNotText if one is not ordinary text
    uint8_t byte = 0;              // the edge from its parent
  };
  static constexpr uint32_t kNotText = 0xFFFFFFFF;
  void build();
  void build_node(uint32_t lo, uint32_t hi, size_t depth, uint8_t byte);
  void walk(uint32_t node, ByteMatcher& matcher, std::vector<uint8_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<int32_t> ids_;  // the kept ids, sorted by their bytes
  std::vector<Node> nodes_;   // nodes_[0]: the root (the empty prefix)
};

}  // namespace deltafin
