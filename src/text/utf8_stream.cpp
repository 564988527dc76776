// Utf8Stream (see utf8_stream.hpp). Validity follows RFC 3629 (utf8::sequence_length in
// text/utf8.hpp).
#include "text/utf8_stream.hpp"

#include "text/utf8.hpp"

namespace deltafin {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

int utf8_char_length(std::string_view s) {
  return utf8::sequence_length(reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = utf8_char_length(std::string_view(pending_).substr(i));
    if (n == 0) break;  // wait for more bytes
    if (n < 0) {
      out += kReplacement;
      i += -n;
    } else {
      out.append(pending_, i, n);
      i += n;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out(pending_.empty() ? std::string_view() : kReplacement);  // a valid but unfinished prefix
  pending_.clear();
  return out;
}

}  // namespace deltafin
