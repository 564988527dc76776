// Catch2 v3 under the name of v2's single header, which the tests include: on the include path
// only when CMake found Catch2 3 (Homebrew's `catch2` formula; Debian 12 ships v2). v3 splits the
// header and renames the two things the tests use beyond the macros: Approx moved into namespace
// Catch, and the string matcher Catch::Contains became Catch::Matchers::ContainsSubstring.
#pragma once

#include <string>

#include <catch2/catch_all.hpp>

using Catch::Approx;

namespace Catch {

inline Matchers::StringContainsMatcher Contains(const std::string& text, CaseSensitive cs = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, cs);
}

}  // namespace Catch
