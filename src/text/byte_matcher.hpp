// A byte-level recogniser of a language (a JSON document under a schema, a literal, a tool
// call's text): bytes are pushed one at a time, a byte that cannot continue is refused, and pushes
// can be undone back to a mark, so that a walk over the vocabulary's byte trie (token_trie.hpp)
// finds every token that can come next without copying the state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deltafin {

class ByteMatcher {
 public:
  virtual ~ByteMatcher() = default;
  // Takes the byte if it can continue what was pushed; false (and no change) when it cannot.
  virtual bool push(uint8_t byte) = 0;
  // A position to rewind() to: the pushes after it are undone.
  virtual size_t mark() const = 0;
  virtual void rewind(size_t mark) = 0;
  // What was pushed is a whole sentence of the language.
  virtual bool complete() const = 0;
  // No byte can follow (complete() and nothing may extend it).
  virtual bool closed() const = 0;
  // Free text: how many characters of ordinary text (whole UTF-8 characters, none of '"', '\\'
  // or the control bytes below 0x20) it would take now, in any order, each leaving it in free text
  // with one fewer to go; 0 when not in free text. The trie walk takes such tokens without pushing
  // their bytes (inside a JSON string nearly every token is one).
  virtual uint32_t free_text() const { return 0; }
};

}  // namespace deltafin
