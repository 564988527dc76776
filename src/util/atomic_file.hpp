// Output files the user names (--stats-json, --record-usage, logits --out, the placement
// manifest), opened before the work that fills them, so a wrong directory fails at once:
//   "-"                     stdout
//   an existing device, FIFO or socket (/dev/null, /dev/stdout, a pipe): written in place, never
//                           replaced
//   anything else           a temporary created exclusively (mkstemp) beside the path (beside a
//                           symlink's target: the link stays a link), written, fsynced, renamed
//                           over the path, and the directory fsynced; a file that appears whole or
//                           not at all. A failed or abandoned write leaves no temporary behind.
// Temporaries are named ".<name>.deltafin-tmp-XXXXXX" and held under an exclusive flock for as
// long as their writer lives. A process killed before it could remove its own (SIGTERM, Ctrl-C
// where not handled, kill -9, a crash) leaves one behind, its lock released by the kernel: each
// new OutputFile removes such unlocked temporaries from the directory it writes in. Nothing else
// is touched: not the user's files, not a temporary whose writer still runs.
#pragma once

#include <string>

namespace deltafin {

class OutputFile {
 public:
  // Opens `path` for writing (the temporary, for a regular file). Throws Error naming the path.
  explicit OutputFile(std::string path);
  ~OutputFile();  // removes an uncommitted temporary
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Writes `bytes` as the whole file and commits it. Once only.
  void write(const std::string& bytes);

 private:
  std::string path_;    // as the user named it
  std::string target_;  // where it lands: the path, or a symlink's target
  std::string tmp_;     // the temporary (regular files), empty otherwise
  int fd_ = -1;
  bool in_place_ = false;  // stdout or a non-regular file
};

// OutputFile(path).write(text).
void write_file_atomically(const std::string& path, const std::string& text);

// Removes the temporaries of dead writers (see above) from `dir`; returns how many. Errors (a
// directory that cannot be listed, a file of another user) are ignored: cleaning is best effort.
int remove_stale_temporaries(const std::string& dir);

// Whether `name` (a file name, no directory) has the form of an OutputFile temporary.
bool is_output_temporary(const std::string& name);

}  // namespace deltafin
