// Files that appear whole or not at all: written to "<path>.tmp", synced, then renamed.
#pragma once

#include <string>

namespace deltafin {

// Throws deltafin::Error naming the file on failure.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace deltafin
