// Errors that reach the user: one line naming the file, tensor, drive or flag involved.
// Loading and parsing throw deltafin::Error (<deltafin/error.hpp>) through fail(); the CLI catches
// it at the edge, prints "deltafin: <message>" and exits non-zero. Hot paths (kernels, decode
// steps) never throw.
#pragma once

#include <fmt/format.h>

#include <deltafin/error.hpp>

#include <string>
#include <utility>

namespace deltafin {

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace deltafin
