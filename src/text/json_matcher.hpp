// A ByteMatcher for one JSON document (an object at the top) under a compiled schema
// (json_schema.hpp). It runs as a pushdown automaton with several threads at once (anyOf
// alternatives, enum values, candidate keys): each thread is a stack of small frames kept in one
// arena as persistent linked stacks, so a byte only appends the frames it changes, and mark() /
// rewind() are an undo log (arena size and the thread list before each push), cheap enough for a
// walk over a whole vocabulary (token_trie.hpp).
//
// What it writes is a subset of JSON's syntax (docs/structured-output.md): the document from its
// '{' (no whitespace before it), at most kMaxWhitespace whitespace bytes in a row, numbers of at
// most kMaxNumberBytes bytes (integers without fraction or exponent), no lone surrogate escapes, object keys without escapes (declared keys exactly as
// json.dumps writes them), enum/const values exactly as json.dumps writes them (compact).
// closed() right after the top-level '}'.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "text/byte_matcher.hpp"
#include "text/json_schema.hpp"

namespace deltafin {

class JsonMatcher : public ByteMatcher {
 public:
  static constexpr uint32_t kMaxWhitespace = 32;
  static constexpr uint32_t kMaxNumberBytes = 32;
  static constexpr size_t kMaxThreads = 64;  // alternatives alive at once (more are dropped)
  static constexpr size_t kMaxDepth = 128;   // nesting of arrays and objects
  static constexpr uint32_t kMaxExpansions = 1024;  // schema nodes a byte may start values of

  explicit JsonMatcher(std::shared_ptr<const CompiledSchema> schema);

  bool push(uint8_t byte) override;
  size_t mark() const override { return history_.size(); }
  void rewind(size_t mark) override;
  bool complete() const override;
  bool closed() const override;
  uint32_t free_text() const override;  // inside a string or an additional key

  struct Frame {
    int32_t parent = -1;
    uint8_t kind = 0;
    uint8_t phase = 0;
    uint8_t ws = 0;    // whitespace run (containers, values); strings: a high surrogate is pending
    uint8_t utf8 = 0;  // strings: continuation bytes due (bits 0-1) and the next one's range (bits 2-4)
    int32_t node = 0;
    uint32_t count = 0;  // array items, string code points, literal or number bytes, depth (root)
    uint32_t aux = 0;    // object: the property whose value comes; literal id; \u digits; key property
    uint64_t bits = 0;   // object: properties seen; free key: hash
  };

 private:
  void step(int32_t top, uint8_t byte, std::vector<int32_t>& out);
  void start_value(int32_t parent, int32_t node, uint8_t byte, std::vector<int32_t>& out, int hops);
  void step_object(int32_t top, uint8_t byte, std::vector<int32_t>& out);
  void step_array(int32_t top, uint8_t byte, std::vector<int32_t>& out);
  void step_string(int32_t top, uint8_t byte, std::vector<int32_t>& out);
  void step_number(int32_t top, uint8_t byte, std::vector<int32_t>& out);
  void step_key(int32_t top, uint8_t byte, std::vector<int32_t>& out);
  void end_key(int32_t top, uint32_t property, std::vector<int32_t>& out);
  int32_t add(const Frame& frame);
  uint32_t depth(int32_t top) const;

  std::shared_ptr<const CompiledSchema> schema_;
  std::vector<Frame> arena_;
  std::vector<int32_t> threads_;  // the top frame of each thread
  std::vector<int32_t> next_;
  uint32_t expansions_ = 0;
  struct Undo {
    size_t arena, log, count;
  };
  std::vector<Undo> history_;
  std::vector<int32_t> thread_log_;  // the thread lists before each push
  std::vector<std::vector<uint64_t>> key_hashes_;  // per node: its declared keys' hashes
};

}  // namespace deltafin
