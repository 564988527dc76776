// ByteMatchers built from others, for the texts a constrained reply must write around its JSON
// (a tool call's "functions.NAME:0", Kimi K3's tag names, DeepSeek-V3's fenced arguments):
//   LiteralMatcher   exactly one text (optionally none at all);
//   SequenceMatcher  its parts one after the other, moving on when the next byte does not continue
//                    a complete part (the texts used here never leave that ambiguous);
//   UnionMatcher     any of its alternatives, run side by side; chosen() says which one completed.
// All undo their pushes through mark() and rewind(), as token_trie.hpp needs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/byte_matcher.hpp"

namespace deltafin {

class LiteralMatcher : public ByteMatcher {
 public:
  // optional: the empty text is complete too.
  explicit LiteralMatcher(std::string text, bool optional = false) : text_(std::move(text)), optional_(optional) {}
  bool push(uint8_t byte) override;
  size_t mark() const override { return pos_; }
  void rewind(size_t mark) override { pos_ = mark; }
  bool complete() const override { return pos_ == text_.size() || (optional_ && pos_ == 0); }
  bool closed() const override { return pos_ == text_.size(); }

 private:
  std::string text_;
  bool optional_;
  size_t pos_ = 0;
};

class SequenceMatcher : public ByteMatcher {
 public:
  explicit SequenceMatcher(std::vector<std::unique_ptr<ByteMatcher>> parts);
  bool push(uint8_t byte) override;
  size_t mark() const override { return log_.size(); }
  void rewind(size_t mark) override;
  bool complete() const override;
  bool closed() const override;

 private:
  struct Entry {
    size_t part_before, part, part_mark;  // the part current before the push, the one that took it, its mark then
  };
  std::vector<std::unique_ptr<ByteMatcher>> parts_;
  size_t current_ = 0;
  std::vector<Entry> log_;
};

class UnionMatcher : public ByteMatcher {
 public:
  explicit UnionMatcher(std::vector<std::unique_ptr<ByteMatcher>> alternatives);
  bool push(uint8_t byte) override;
  size_t mark() const override { return log_.size(); }
  void rewind(size_t mark) override;
  bool complete() const override { return chosen() >= 0; }
  bool closed() const override;
  // The first alternative still alive that is complete; -1 when none is.
  int chosen() const;

 private:
  struct Entry {
    std::vector<uint8_t> alive;
    std::vector<size_t> marks;
  };
  std::vector<std::unique_ptr<ByteMatcher>> alternatives_;
  std::vector<uint8_t> alive_;
  std::vector<Entry> log_;
};

}  // namespace deltafin
