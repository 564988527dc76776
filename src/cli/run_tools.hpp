// `deltafin run --chat --tools FILE [--tool-choice C]`: the tools (a JSON array in OpenAI's
// `tools` form) are declared in the model's chat format as serve declares them, checked by the
// same rules (an error names the file and the field); a forced choice ("required" or a
// function's name) decodes under the same constraint. The reply is printed split: the answer on
// stdout as it comes, the reasoning on stderr, then each tool call on stdout as one JSON line
// {"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decode/token_constraint.hpp"
#include "serve/chat_turn.hpp"
#include "serve/openai_format.hpp"
#include "serve/request.hpp"
#include "text/reply_parser.hpp"
#include "text/token_trie.hpp"

namespace deltafin::cli {

class RunTools {
 public:
  // messages: the run's system and user messages. Throws deltafin::Error naming the file.
  RunTools(const std::string& tools_file, const std::string& tool_choice, std::vector<ChatMessage> messages, ChatStyle style);

  std::vector<int32_t> prompt(const Tokenizer& tokenizer) const;
  const std::vector<std::string>& stops() const { return turn_->stops(); }
  // nullptr without a forced choice; made once (it holds the vocabulary's trie).
  TokenConstraint* constraint(const Tokenizer& tokenizer, const std::vector<int32_t>& end_ids);
  // The reply's text as it comes: the answer to `emit`, the reasoning to stderr.
  template <class Emit>
  void take(std::string_view text, Emit&& emit) {
    print(parser_->push(text), emit);
  }
  template <class Emit>
  void finish(Emit&& emit) {
    print(parser_->finish(), emit);
    for (const ToolCall& call : parser_->reply().tool_calls) emit("\n" + serve::tool_call_json(call));
  }

 private:
  template <class Emit>
  void print(const std::vector<ReplyDelta>& deltas, Emit& emit) {
    for (const ReplyDelta& d : deltas) {
      if (d.kind == ReplyDelta::Kind::Content) emit(d.text);
      if (d.kind == ReplyDelta::Kind::Reasoning) reasoning(d.text);
    }
  }
  static void reasoning(const std::string& text);

  serve::CompletionRequest request_;
  ChatStyle style_;
  std::optional<serve::ChatTurn> turn_;
  std::optional<ReplyParser> parser_;
  std::unique_ptr<TokenTrie> trie_;
  std::unique_ptr<TokenConstraint> constraint_;
};

}  // namespace deltafin::cli
