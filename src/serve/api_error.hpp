// An error answered to an API client: the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param"}}, where param names the request field at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace deltafin::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;  // "" when no one field is at fault
  std::string type;
};

}  // namespace deltafin::serve
