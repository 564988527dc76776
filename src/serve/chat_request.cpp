// Chat request fields (see chat_request.hpp).
#include "serve/chat_request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "serve/json_fields.hpp"

namespace deltafin::serve {
namespace {

using namespace json_fields;

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string message_content(element value, const std::string& name) {
  if (value.type() == element_type::STRING) return string_field(value, name);
  simdjson::dom::array parts;
  if (value.get_array().get(parts) != simdjson::SUCCESS) bad_field(name, "a string or an array of text parts");
  std::string text;
  size_t i = 0;
  for (element part : parts) {
    const std::string part_name = fmt::format("{}[{}]", name, i++);
    const auto type = field(part, "type");
    const auto part_text = field(part, "text");
    if (part.type() != element_type::OBJECT || !type || string_field(*type, part_name + ".type") != "text" || !part_text)
      bad_field(part_name, "a text part {\"type\": \"text\", \"text\": ...} (this server reads text only)");
    text += string_field(*part_text, part_name + ".text");
  }
  return text;
}

element object_field(element value, const std::string& name) {
  if (value.type() != element_type::OBJECT) bad_field(name, "an object");
  return value;
}

std::string required_string(element object, const char* key, const std::string& name) {
  const auto v = field(object, key);
  if (!v) throw ApiError(400, fmt::format("'{}' is required", name), name);
  return string_field(*v, name);
}

// OpenAI's rule for function names: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.
bool valid_function_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::vector<ToolCall> parse_tool_calls(element value, const std::string& name) {
  simdjson::dom::array list;
  if (value.get_array().get(list) != simdjson::SUCCESS) bad_field(name, "an array");
  std::vector<ToolCall> calls;
  size_t i = 0;
  for (element call : list) {
    const std::string call_name = fmt::format("{}[{}]", name, i++);
    object_field(call, call_name);
    ToolCall c;
    c.id = required_string(call, "id", call_name + ".id");
    if (auto type = field(call, "type"); type && string_field(*type, call_name + ".type") != "function")
      bad_field(call_name + ".type", "\"function\"");
    const auto function = field(call, "function");
    if (!function) throw ApiError(400, fmt::format("'{}.function' is required", call_name), call_name + ".function");
    object_field(*function, call_name + ".function");
    c.name = required_string(*function, "name", call_name + ".function.name");
    c.arguments = required_string(*function, "arguments", call_name + ".function.arguments");
    calls.push_back(std::move(c));
  }
  return calls;
}

void parse_messages(element root, CompletionRequest& r) {
  const auto messages = field(root, "messages");
  if (!messages) throw ApiError(400, "'messages' is required", "messages");
  simdjson::dom::array list;
  if (messages->get_array().get(list) != simdjson::SUCCESS) bad_field("messages", "an array");
  std::set<std::string> call_ids;  // of the assistant turns so far
  size_t i = 0;
  for (element m : list) {
    const std::string name = fmt::format("messages[{}]", i++);
    if (m.type() != element_type::OBJECT) bad_field(name, "an object");
    const auto role = field(m, "role");
    if (!role) throw ApiError(400, fmt::format("'{}.role' is required", name), name + ".role");
    ChatMessage message;
    message.role = string_field(*role, name + ".role");
    if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
    if (message.role != "system" && message.role != "user" && message.role != "assistant" && message.role != "tool")
      bad_field(name + ".role", "\"system\", \"user\", \"assistant\" or \"tool\"");
    if (auto content = field(m, "content")) message.content = message_content(*content, name + ".content");
    else message.content_null = true;
    if (auto n = field(m, "name")) message.name = string_field(*n, name + ".name");
    if (message.role == "assistant") {
      if (auto calls = field(m, "tool_calls")) message.tool_calls = parse_tool_calls(*calls, name + ".tool_calls");
      for (const ToolCall& c : message.tool_calls) call_ids.insert(c.id);
      if (auto reasoning = field(m, "reasoning_content")) message.reasoning_content = string_field(*reasoning, name + ".reasoning_content");
    }
    if (message.role == "tool") {
      message.tool_call_id = required_string(m, "tool_call_id", name + ".tool_call_id");
      if (!call_ids.count(message.tool_call_id))
        bad_field(name + ".tool_call_id", fmt::format("the id of a tool call an earlier assistant message made (no call has the id '{}')",
                                                      message.tool_call_id));
    }
    r.messages.push_back(std::move(message));
  }
  if (r.messages.empty()) bad_field("messages", "a non-empty array");
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}].
void parse_tools(element root, CompletionRequest& r) {
  const auto tools = field(root, "tools");
  if (!tools) return;
  simdjson::dom::array list;
  if (tools->get_array().get(list) != simdjson::SUCCESS) bad_field("tools", "an array of {\"type\": \"function\", \"function\": {...}}");
  std::set<std::string> names;
  size_t i = 0;
  for (element tool : list) {
    const std::string name = fmt::format("tools[{}]", i++);
    object_field(tool, name);
    if (required_string(tool, "type", name + ".type") != "function") bad_field(name + ".type", "\"function\"");
    const auto function = field(tool, "function");
    if (!function) throw ApiError(400, fmt::format("'{}.function' is required", name), name + ".function");
    object_field(*function, name + ".function");
    const std::string function_name = required_string(*function, "name", name + ".function.name");
    if (!valid_function_name(function_name)) bad_field(name + ".function.name", "1 to 64 letters, digits, '_' or '-'");
    if (!names.insert(function_name).second)
      bad_field(name + ".function.name", fmt::format("unique (another tool is named '{}')", function_name));
    if (auto d = field(*function, "description")) string_field(*d, name + ".function.description");
    if (auto strict = field(*function, "strict")) bool_field(*strict, name + ".function.strict");
    if (auto parameters = field(*function, "parameters")) {
      const std::string p = name + ".function.parameters";
      object_field(*parameters, p);
      if (auto type = field(*parameters, "type"); type && (type->type() != element_type::STRING || string_field(*type, p) != "object"))
        bad_field(p + ".type", "\"object\" (a function's parameters are a JSON Schema of an object)");
      if (auto properties = field(*parameters, "properties")) object_field(*properties, p + ".properties");
    }
  }
  if (!names.empty()) r.tools = parse_json(simdjson::minify(*tools));
}

void parse_tool_choice(element root, CompletionRequest& r) {
  const auto choice = field(root, "tool_choice");
  if (!choice) return;
  if (choice->type() == element_type::STRING) {
    r.tool_choice = string_field(*choice, "tool_choice");
    if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
      bad_field("tool_choice", "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  } else {
    object_field(*choice, "tool_choice");
    if (required_string(*choice, "type", "tool_choice.type") != "function") bad_field("tool_choice.type", "\"function\"");
    const auto function = field(*choice, "function");
    if (!function) throw ApiError(400, "'tool_choice.function' is required", "tool_choice.function");
    object_field(*function, "tool_choice.function");
    r.tool_choice = "function";
    r.tool_choice_name = required_string(*function, "name", "tool_choice.function.name");
    if (!r.tool_function(r.tool_choice_name))
      bad_field("tool_choice.function.name", fmt::format("the name of a function in 'tools' (none is named '{}')", r.tool_choice_name));
  }
  if ((r.tool_choice == "required") && !r.tools) bad_field("tool_choice", "\"none\" or \"auto\" when the request declares no tools");
}

void parse_response_format(element root, CompletionRequest& r) {
  const auto format = field(root, "response_format");
  if (!format) return;
  object_field(*format, "response_format");
  r.response_format = required_string(*format, "type", "response_format.type");
  if (r.response_format == "json_schema") {
    const auto spec = field(*format, "json_schema");
    if (!spec) throw ApiError(400, "'response_format.json_schema' is required", "response_format.json_schema");
    object_field(*spec, "response_format.json_schema");
    if (auto n = field(*spec, "name")) string_field(*n, "response_format.json_schema.name");
    if (auto strict = field(*spec, "strict")) bool_field(*strict, "response_format.json_schema.strict");
    const auto schema = field(*spec, "schema");
    if (!schema) throw ApiError(400, "'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
    object_field(*schema, "response_format.json_schema.schema");
    r.response_schema = parse_json(simdjson::minify(*schema));
  } else if (r.response_format != "text" && r.response_format != "json_object") {
    bad_field("response_format.type", "\"text\", \"json_object\" or \"json_schema\"");
  }
}

}  // namespace

void parse_chat_fields(element root, CompletionRequest& r) {
  parse_messages(root, r);
  parse_tools(root, r);
  parse_tool_choice(root, r);
  if (auto v = field(root, "parallel_tool_calls")) r.parallel_tool_calls = bool_field(*v, "parallel_tool_calls");
  parse_response_format(root, r);
  if (auto v = field(root, "reasoning_format")) {
    const std::string format = string_field(*v, "reasoning_format");
    if (format != "separate" && format != "inline") bad_field("reasoning_format", "\"separate\" or \"inline\"");
    r.inline_reasoning = format == "inline";
  }
  if (auto kwargs = field(root, "chat_template_kwargs")) {
    object_field(*kwargs, "chat_template_kwargs");
    if (auto thinking = field(*kwargs, "thinking")) r.thinking = bool_field(*thinking, "chat_template_kwargs.thinking");
  }
}

}  // namespace deltafin::serve
