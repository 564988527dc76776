// A constraint on a whole chat reply, written as a small program of steps in the chat format's
// own tokens: a control token (one of several, each leading to its own next step), text a
// ByteMatcher decides (a tag name, "functions.NAME:0", JSON under a schema), free text (reasoning,
// an answer before a tool call: any ordinary token, until one of the step's control tokens), and
// the end (the format's stop tokens). reply_programs.hpp writes the programs: a forced tool call
// (tool_choice "required" or a named function) and structured output (response_format) for each
// chat family. The target scores every token; the program only masks what cannot come next.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "decode/token_constraint.hpp"
#include "text/byte_matcher.hpp"
#include "text/token_trie.hpp"

namespace deltafin {

// What the steps of one reply share: the tool each call names, and how many calls were made.
struct ReplyState {
  std::string tool;  // the tool the current call names
  int calls = 0;     // calls completed
};

struct ReplyStep {
  enum class Kind { Special, Text, Free, End };
  struct Edge {
    int32_t token;
    int next;
  };
  Kind kind = Kind::End;
  std::vector<Edge> edges;  // Special, Free: the control tokens allowed here and where each leads
  // Text: the matcher, made when the step is entered; `done` runs when the step is left; then
  // `next` (a Special or End step), whose tokens are allowed once the matcher is complete.
  std::function<std::unique_ptr<ByteMatcher>(const ReplyState&)> make;
  std::function<void(ByteMatcher&, ReplyState&)> done;
  int next = -1;
};

struct ReplyProgram {
  std::vector<ReplyStep> steps;
  int start = 0;
};

class ReplyConstraint : public TokenConstraint {
 public:
  // end_ids: the tokens an End step allows (none: the reply is finished on reaching it).
  ReplyConstraint(ReplyProgram program, const TokenTrie& trie, std::vector<int32_t> end_ids);

  void mask(std::vector<float>& logits) override;
  // Throws deltafin::Error for a token mask() did not leave.
  void accept(int32_t token) override;
  bool finished() const override;

 private:
  void enter(int step);
  // The control tokens that leave a step (an End step's end tokens keep it there), and where each leads.
  std::vector<ReplyStep::Edge> edges_of(int step) const;
  // The control tokens allowed now besides the matcher's text: a Text step's next step's, once complete.
  std::vector<ReplyStep::Edge> edges_now() const;

  ReplyProgram program_;
  const TokenTrie& trie_;
  std::vector<int32_t> end_ids_;
  int step_ = 0;
  ReplyState state_;
  std::unique_ptr<ByteMatcher> matcher_;  // of a Text step
  std::vector<uint8_t> scratch_;
};

}  // namespace deltafin
