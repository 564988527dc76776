// UTF-8 helpers shared by the tokenizers (tiktoken, tokenizer.json BPE) and streaming
// detokenization (Utf8Stream). Validity follows RFC 3629: no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF; so the lead bytes C0, C1 and F5..FF never start a
// character. Neither tokenizer rejects invalid UTF-8: for their regex splits each byte that starts
// no valid character stands in as U+E000 (see replace_invalid), and BPE then runs on the original
// bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin::utf8 {

// cp_at's code point for a byte that starts no valid character.
inline constexpr uint32_t kInvalid = 0xFFFFFFFF;

// U+E000 (private use, category Co), the stand-in for an invalid byte in the text a split regex
// sees: no letter, number, mark, punctuation, symbol or space class matches it.
inline constexpr std::string_view kInvalidByteStandIn = "\xEE\x80\x80";

// The sequence that starts at s[0] (n >= 1 bytes readable): its length (1..4) when it is a valid
// character; 0 when s[0, n) is only a valid prefix of one (more bytes could complete it); -k when
// the first k bytes (k >= 1) are a maximal invalid subpart, which replacement turns into one U+FFFD.
inline int sequence_length(const unsigned char* s, size_t n) {
  const unsigned c = s[0];
  if (c < 0x80) return 1;
  int len;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    const unsigned b = s[k];
    if (b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xBFu)) return -k;
  }
  return len;
}

// Length of the valid character at s[i] (1..4), or 0 when the byte starts no valid character
// within s[0, n) (invalid, or cut off at n).
inline size_t char_len(const unsigned char* s, size_t i, size_t n) {
  const int len = sequence_length(s + i, n - i);
  return len > 0 ? static_cast<size_t>(len) : 0;
}

// Decodes the valid character at s[i] (len from char_len).
inline uint32_t decode(const unsigned char* s, size_t i, size_t len) {
  if (len == 1) return s[i];
  uint32_t c = s[i] & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (s[i + k] & 0x3F);
  return c;
}

// Offset of the first byte at or after i that starts no valid character, or n. ASCII goes eight
// bytes at a time.
inline size_t first_invalid(const unsigned char* s, size_t n, size_t i = 0) {
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const size_t len = char_len(s, i, n);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

// The code point at s[i] (kInvalid for a byte that starts no valid character), its length in len
// (1 for an invalid byte).
inline uint32_t cp_at(const unsigned char* s, size_t i, size_t n, size_t& len) {
  len = char_len(s, i, n);
  if (!len) return len = 1, kInvalid;
  return decode(s, i, len);
}

// Start of the character that ends at s[e) (never before b); e - 1 when the bytes before e end
// in no valid character.
inline size_t char_before(const unsigned char* s, size_t b, size_t e) {
  size_t c = e - 1;
  while (c > b && (s[c] & 0xC0) == 0x80 && e - c < 4) --c;
  return char_len(s, c, e) == e - c ? c : e - 1;
}

// The text a split regex sees for s[0, n) when it holds invalid UTF-8: `view` is s with each byte
// that starts no valid character replaced by kInvalidByteStandIn, and at[k] is the offset in s of
// view[k] (all three bytes of a stand-in map to its byte), with at[view.size()] == n, so that
// match boundaries map back to s.
inline void replace_invalid(const unsigned char* s, size_t n, std::string& view, std::vector<uint32_t>& at) {
  view.clear();
  at.clear();
  view.reserve(n + 16);
  at.reserve(n + 16);
  for (size_t i = 0; i < n;) {
    const size_t len = char_len(s, i, n);
    if (len) {
      view.append(reinterpret_cast<const char*>(s + i), len);
      for (size_t k = 0; k < len; ++k) at.push_back(static_cast<uint32_t>(i + k));
      i += len;
    } else {
      view += kInvalidByteStandIn;
      at.insert(at.end(), kInvalidByteStandIn.size(), static_cast<uint32_t>(i));
      ++i;
    }
  }
  at.push_back(static_cast<uint32_t>(n));
}

}  // namespace deltafin::utf8
