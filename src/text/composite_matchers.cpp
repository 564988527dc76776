// Literal, sequence and union matchers (see composite_matchers.hpp).
#include "text/composite_matchers.hpp"

namespace deltafin {

bool LiteralMatcher::push(uint8_t byte) {
  if (pos_ >= text_.size() || static_cast<uint8_t>(text_[pos_]) != byte) return false;
  ++pos_;
  return true;
}

SequenceMatcher::SequenceMatcher(std::vector<std::unique_ptr<ByteMatcher>> parts) : parts_(std::move(parts)) {}

bool SequenceMatcher::push(uint8_t byte) {
  for (size_t part = current_; part < parts_.size(); ++part) {
    const size_t part_mark = parts_[part]->mark();
    if (parts_[part]->push(byte)) {
      log_.push_back({current_, part, part_mark});
      current_ = part;
      return true;
    }
    if (!parts_[part]->complete()) return false;  // the next part starts only after a complete one
  }
  return false;
}

void SequenceMatcher::rewind(size_t mark) {
  while (log_.size() > mark) {
    const Entry& e = log_.back();
    parts_[e.part]->rewind(e.part_mark);
    current_ = e.part_before;
    log_.pop_back();
  }
}

bool SequenceMatcher::complete() const {
  for (size_t part = current_; part < parts_.size(); ++part)
    if (!parts_[part]->complete()) return false;
  return true;
}

bool SequenceMatcher::closed() const { return current_ + 1 == parts_.size() && parts_.back()->closed(); }

UnionMatcher::UnionMatcher(std::vector<std::unique_ptr<ByteMatcher>> alternatives)
    : alternatives_(std::move(alternatives)), alive_(alternatives_.size(), 1) {}

bool UnionMatcher::push(uint8_t byte) {
  Entry entry{alive_, {}};
  entry.marks.reserve(alternatives_.size());
  for (const auto& a : alternatives_) entry.marks.push_back(a->mark());
  std::vector<uint8_t> alive(alternatives_.size(), 0);
  bool any = false;
  for (size_t i = 0; i < alternatives_.size(); ++i)
    if (alive_[i] && alternatives_[i]->push(byte)) alive[i] = 1, any = true;
  if (!any) return false;  // (a refused push changes no alternative)
  log_.push_back(std::move(entry));
  alive_ = std::move(alive);
  return true;
}

void UnionMatcher::rewind(size_t mark) {
  while (log_.size() > mark) {
    Entry& e = log_.back();
    for (size_t i = 0; i < alternatives_.size(); ++i)
      if (e.alive[i]) alternatives_[i]->rewind(e.marks[i]);
    alive_ = std::move(e.alive);
    log_.pop_back();
  }
}

bool UnionMatcher::closed() const {
  for (size_t i = 0; i < alternatives_.size(); ++i)
    if (alive_[i] && !alternatives_[i]->closed()) return false;
  return true;
}

int UnionMatcher::chosen() const {
  for (size_t i = 0; i < alternatives_.size(); ++i)
    if (alive_[i] && alternatives_[i]->complete()) return static_cast<int>(i);
  return -1;
}

}  // namespace deltafin
