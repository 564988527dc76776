// Input files must be regular files: a directory, FIFO, device or socket named where a file is
// read is refused in one line (open() on a FIFO without a writer would wait forever). Every
// failure names the path and the system's reason.
#pragma once

#include <string>
#include <string_view>

namespace deltafin {

// Throws Error "<path>: <what> is a directory" / "... is not a regular file (...)" when `path`
// exists and is not a regular file (symlinks are followed). A missing path is left to the
// caller's open(), which names its own error.
void require_regular_file(const std::string& path, std::string_view what);

// The whole of a (small) input file, checked as above. Throws Error "<path>: cannot open <what>:
// <reason>" (with `hint` after the reason when the file does not exist) or "... read failed: ...".
std::string read_input_file(const std::string& path, std::string_view what, std::string_view hint = {});

}  // namespace deltafin
