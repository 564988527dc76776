// The fields only chat requests have: messages (with the tool role, assistant tool_calls and
// reasoning_content), tools, tool_choice, parallel_tool_calls, response_format, reasoning_format
// and chat_template_kwargs.thinking. A malformed one is an ApiError 400 naming the field
// ("tools[0].function.name", "messages[3].tool_call_id", ...).
#pragma once

#include <simdjson.h>

#include "serve/request.hpp"

namespace deltafin::serve {

void parse_chat_fields(simdjson::dom::element root, CompletionRequest& r);

}  // namespace deltafin::serve
