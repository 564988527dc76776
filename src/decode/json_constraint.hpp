// Structured output's TokenConstraint: the next token must continue a JSON document under the
// request's schema (a JsonMatcher over the vocabulary's TokenTrie); the end ids (the chat
// format's stop tokens) are allowed only once the document is complete. Without end ids the
// constraint is finished as soon as the matcher is closed (after the top-level '}').
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "decode/matcher_mask.hpp"
#include "decode/token_constraint.hpp"
#include "text/json_matcher.hpp"
#include "text/token_trie.hpp"

namespace deltafin {

class JsonConstraint : public TokenConstraint {
 public:
  // The trie outlives the constraint (one per tokenizer).
  JsonConstraint(std::shared_ptr<const CompiledSchema> schema, const TokenTrie& trie, std::vector<int32_t> end_ids);

  void mask(std::vector<float>& logits) override;
  // Throws deltafin::Error for a token mask() did not leave.
  void accept(int32_t token) override;
  bool finished() const override;

  const ByteMatcher& matcher() const { return matcher_; }

 private:
  JsonMatcher matcher_;
  const TokenTrie& trie_;
  std::vector<int32_t> end_ids_;
  std::vector<uint8_t> scratch_;
  bool ended_ = false;  // an end id was accepted
};

}  // namespace deltafin
