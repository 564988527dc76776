// Input files must be regular files: a directory, FIFO, device or socket named where a file is
// read is refused in one line (open() on a FIFO without a writer would wait forever).
#pragma once

#include <string>
#include <string_view>

namespace deltafin {

// Throws Error "<path>: <what> is a directory" / "... is not a regular file (...)" when `path`
// exists and is not a regular file (symlinks are followed). A missing path is left to the
// caller's open(), which names its own error.
void require_regular_file(const std::string& path, std::string_view what);

}  // namespace deltafin
