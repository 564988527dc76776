// Utf8Stream (see utf8_stream.hpp). Validity follows RFC 3629: no overlongs, no surrogates,
// nothing above U+10FFFF.
#include "text/utf8_stream.hpp"

namespace deltafin {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

int utf8_char_length(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int i = 1; i < n; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return 0;
    const unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
    if (b(i) < lo_i || b(i) > hi_i) return -i;  // the first i bytes are a maximal invalid subpart
  }
  return n;
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
