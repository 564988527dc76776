// The error the engine and every command report bad input with: one line naming the file,
// tensor, drive or flag involved (Engine::open and Session::append throw it; the CLI prints
// "deltafin: <message>" and exits 1). The lowest layer, so that the kernels throw it too;
// src/util/error.hpp adds fail(), which formats the message.
#pragma once

#include <stdexcept>
#include <string>

namespace deltafin {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace deltafin
