// See input_file.hpp.
#include "util/input_file.hpp"

#include <sys/stat.h>

#include "util/error.hpp"

namespace deltafin {

void require_regular_file(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) fail("{}: {} is a directory, not a file", path, what);
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a device";
    fail("{}: {} is {}, not a regular file", path, what, kind);
  }
}

}  // namespace deltafin
