// Streaming detokenization: token bytes go in as they are generated; only complete UTF-8
// characters come out, so a terminal never sees half a character even when one character is
// split over several byte tokens. Bytes that can never complete a character (invalid UTF-8)
// come out as U+FFFD, one per bad byte, like Python's errors="replace" and the decoders of the
// reference tokenizers.
#pragma once

#include <string>
#include <string_view>

namespace deltafin {

class Utf8Stream {
 public:
  // Adds bytes; returns the text that is now complete.
  std::string push(std::string_view bytes);
  // Ends the stream: whatever is pending is incomplete and comes out as U+FFFD.
  std::string finish();

 private:
  std::string pending_;
};

// Length of the valid UTF-8 character starting at s[0] (1..4), 0 when s holds only a valid
// prefix of one (more bytes could complete it), -k when the first k bytes are a maximal invalid
// subpart (k >= 1) to be replaced by one U+FFFD.
int utf8_char_length(std::string_view s);

}  // namespace deltafin
