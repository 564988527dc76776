// --stop STRING: generation ends when the text contains a stop string, which is not printed.
// Text that could still become the start of a stop string is held back until it is decided.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltafin {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);

  // Adds decoded text; returns what may be printed now.
  std::string push(std::string_view text);
  // Generation is over: returns the held-back text (nothing once stopped).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace deltafin
