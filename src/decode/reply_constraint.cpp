// The reply program's interpreter (see reply_constraint.hpp).
#include "decode/reply_constraint.hpp"

#include <algorithm>
#include <limits>

#include "decode/matcher_mask.hpp"
#include "util/error.hpp"

namespace deltafin {

ReplyConstraint::ReplyConstraint(ReplyProgram program, const TokenTrie& trie, std::vector<int32_t> end_ids)
    : program_(std::move(program)), trie_(trie), end_ids_(std::move(end_ids)) {
  enter(program_.start);
}

void ReplyConstraint::enter(int step) {
  step_ = step;
  const ReplyStep& s = program_.steps[static_cast<size_t>(step)];
  matcher_ = s.kind == ReplyStep::Kind::Text ? s.make(state_) : nullptr;
}

std::vector<ReplyStep::Edge> ReplyConstraint::edges_of(int step) const {
  const ReplyStep& s = program_.steps[static_cast<size_t>(step)];
  if (s.kind != ReplyStep::Kind::End) return s.edges;
  std::vector<ReplyStep::Edge> ends;  // (the end tokens stay at the end)
  for (int32_t id : end_ids_) ends.push_back({id, step});
  return ends;
}

std::vector<ReplyStep::Edge> ReplyConstraint::edges_now() const {
  const ReplyStep& s = program_.steps[static_cast<size_t>(step_)];
  if (s.kind != ReplyStep::Kind::Text) return edges_of(step_);
  return matcher_->complete() ? edges_of(s.next) : std::vector<ReplyStep::Edge>{};
}

void ReplyConstraint::mask(std::vector<float>& logits) {
  const ReplyStep& s = program_.steps[static_cast<size_t>(step_)];
  std::vector<int32_t> specials;
  for (const ReplyStep::Edge& e : edges_now()) specials.push_back(e.token);
  if (s.kind == ReplyStep::Kind::Text) {
    mask_by_matcher(trie_, *matcher_, specials, logits, scratch_);
    return;
  }
  // Special and End: only their tokens; Free: every ordinary token and its control tokens.
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    const bool ordinary = id < trie_.vocab_size() && !trie_.bytes(id).empty();
    const bool listed = std::find(specials.begin(), specials.end(), id) != specials.end();
    if (!(listed || (s.kind == ReplyStep::Kind::Free && ordinary))) logits[static_cast<size_t>(id)] = kMasked;
  }
}

void ReplyConstraint::accept(int32_t token) {
  const ReplyStep& s = program_.steps[static_cast<size_t>(step_)];
  if (s.kind == ReplyStep::Kind::Text && push_token(trie_, *matcher_, token)) return;
  if (s.kind == ReplyStep::Kind::Free && token < trie_.vocab_size() && !trie_.bytes(token).empty()) return;
  for (const ReplyStep::Edge& e : edges_now()) {
    if (e.token != token) continue;
    if (s.kind == ReplyStep::Kind::Text && s.done) s.done(*matcher_, state_);  // the text is whole
    return enter(e.next);
  }
  fail("constrained reply: token {} cannot come here (step {})", token, step_);
}

bool ReplyConstraint::finished() const {
  const ReplyStep& s = program_.steps[static_cast<size_t>(step_)];
  if (s.kind == ReplyStep::Kind::End) return end_ids_.empty();
  return s.kind == ReplyStep::Kind::Text && end_ids_.empty() && matcher_->closed() &&
         program_.steps[static_cast<size_t>(s.next)].kind == ReplyStep::Kind::End;
}

}  // namespace deltafin
