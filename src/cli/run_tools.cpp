// `run --chat --tools` (see run_tools.hpp): the tools file is checked by serve's request parser,
// as the body {"messages": [...], "tools": FILE, "tool_choice": ...}.
#include "cli/run_tools.hpp"

#include <cstdio>

#include "serve/api_error.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"
#include "util/json_string.hpp"

namespace deltafin::cli {

RunTools::RunTools(const std::string& tools_file, const std::string& tool_choice, std::vector<ChatMessage> messages, ChatStyle style)
    : style_(style) {
  const std::string tools = read_input_file(tools_file, "the tools file (--tools)");
  std::string body = "{\"messages\": [{\"role\": \"user\", \"content\": \"\"}], \"tools\": " + tools + ", \"tool_choice\": ";
  body += tool_choice == "auto" || tool_choice == "none" || tool_choice == "required"
              ? json_string(tool_choice)
              : "{\"type\": \"function\", \"function\": {\"name\": " + json_string(tool_choice) + "}}";
  body += "}";
  try {
    request_ = serve::parse_chat_request(body);
    request_.messages = std::move(messages);
    turn_.emplace(request_, style);
  } catch (const serve::ApiError& e) {
    const bool choice = e.param.rfind("tool_choice", 0) == 0;
    fail("{}: {}", choice ? std::string("--tool-choice") : tools_file, e.what());
  }
  parser_.emplace(turn_->parser());
}

std::vector<int32_t> RunTools::prompt(const Tokenizer& tokenizer) const {
  return encode_segments(tokenizer, render_chat(style_, request_.messages, turn_->options()));
}

TokenConstraint* RunTools::constraint(const Tokenizer& tokenizer, const std::vector<int32_t>& end_ids) {
  if (!turn_->constrained()) return nullptr;
  if (!constraint_) {
    trie_ = std::make_unique<TokenTrie>(tokenizer);
    try {
      constraint_ = turn_->constraint(tokenizer, *trie_, end_ids);
    } catch (const serve::ApiError& e) {
      fail("--tool-choice: {}", e.what());
    }
  }
  return constraint_.get();
}

void RunTools::reasoning(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace deltafin::cli
