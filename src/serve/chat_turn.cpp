// A chat request's format-specific parts (see chat_turn.hpp).
#include "serve/chat_turn.hpp"

#include <fmt/format.h>

#include "decode/reply_constraint.hpp"
#include "serve/api_error.hpp"
#include "util/error.hpp"

namespace deltafin::serve {
namespace {

// Compiles a schema of the request; a SchemaError is a 400 naming the keyword.
std::shared_ptr<const CompiledSchema> compile(const JsonValue& schema, SchemaMode mode, const std::string& field) {
  try {
    return std::make_shared<const CompiledSchema>(compile_json_schema(schema, mode));
  } catch (const SchemaError& e) {
    throw ApiError(400, fmt::format("'{}': {}", field, e.what()), e.path.empty() ? field : field + "." + e.path);
  }
}

}  // namespace

ChatTurn::ChatTurn(const CompletionRequest& request, ChatStyle style) : style_(style), inline_reasoning_(request.inline_reasoning) {
  const bool has_tools = request.tools.has_value();
  if (style == ChatStyle::Plain && (has_tools || request.tool_choice != "auto"))
    throw ApiError(400, fmt::format("this model's chat format ({}) has no tool calls", chat_style_name(style)),
                   has_tools ? "tools" : "tool_choice");
  if (style == ChatStyle::Plain)
    for (size_t i = 0; i < request.messages.size(); ++i)
      if (request.messages[i].role == "tool" || !request.messages[i].tool_calls.empty())
        throw ApiError(400, fmt::format("this model's chat format ({}) has no tool calls", chat_style_name(style)),
                       fmt::format("messages[{}]", i));
  options_.tools = has_tools ? &*request.tools : nullptr;
  options_.tool_choice = request.tool_choice == "function" ? request.tool_choice_name : request.tool_choice;
  options_.response_format = request.response_format == "text" ? "" : request.response_format;
  options_.response_schema = request.response_schema ? &*request.response_schema : nullptr;
  options_.thinking = request.thinking;
  if (has_tools && request.tool_choice == "none") stops_.push_back(tool_calls_start(style));
  parallel_ = request.parallel_tool_calls;
  if (request.tool_choice == "required" || request.tool_choice == "function") {
    const auto& tools = request.tools->items();
    for (size_t i = 0; i < tools.size(); ++i) {
      const JsonValue& function = *tools[i].find("function");
      const std::string& name = function.find("name")->as_string();
      if (request.tool_choice == "function" && name != request.tool_choice_name) continue;
      const JsonValue* parameters = function.find("parameters");
      forced_tools_.push_back({name, parameters ? compile(*parameters, SchemaMode::kLenient, fmt::format("tools[{}].function.parameters", i))
                                                : std::make_shared<const CompiledSchema>(json_object_schema())});
    }
  }
  if (request.response_format == "json_object") response_schema_ = std::make_shared<const CompiledSchema>(json_object_schema());
  if (request.response_format == "json_schema")
    response_schema_ = compile(*request.response_schema, SchemaMode::kStrict, "response_format.json_schema.schema");
}

std::unique_ptr<TokenConstraint> ChatTurn::constraint(const Tokenizer& tokenizer, const TokenTrie& trie,
                                                      const std::vector<int32_t>& end_ids) const {
  const bool thinking = style_ == ChatStyle::KimiK3 && options_.thinking;
  try {
    if (!forced_tools_.empty())
      return std::make_unique<ReplyConstraint>(tool_call_program(style_, tokenizer, forced_tools_, parallel_, thinking), trie, end_ids);
    if (response_schema_)
      return std::make_unique<ReplyConstraint>(structured_output_program(style_, tokenizer, response_schema_, thinking), trie, end_ids);
  } catch (const Error& e) {  // the vocabulary lacks a control token the format's replies need
    throw ApiError(400, e.what(), forced_tools_.empty() ? "response_format" : "tool_choice");
  }
  return nullptr;
}

ReplyParser ChatTurn::parser() const {
  return ReplyParser(style_, style_ == ChatStyle::KimiK3 && options_.thinking, inline_reasoning_);
}

std::string ChatTurn::finish_reason(const std::string& generation_finish, const Reply& reply) {
  return generation_finish == "stop" && !reply.tool_calls.empty() ? "tool_calls" : generation_finish;
}

}  // namespace deltafin::serve
