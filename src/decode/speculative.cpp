// Verification and the speculative step (see speculative.hpp).
#include "decode/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace deltafin {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<float> row(std::span<const float> logits, int64_t i, int64_t vocab) {
  return std::vector<float>(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
}

constexpr double kAverage = 0.15;  // weight of a new observation in the moving averages

}  // namespace

std::vector<int32_t> verify_drafts(const Draft& draft, std::span<const float> logits, int64_t vocab, Sampler& sampler) {
  const int64_t k = static_cast<int64_t>(draft.tokens.size());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < k; ++i) {
    const std::vector<float> l = row(logits, i, vocab);
    const int32_t d = draft.tokens[i];
    if (sampler.greedy()) {
      const int32_t t = sampler.sample(l);
      out.push_back(t);
      if (t != d) return out;
      continue;
    }
    std::vector<double> p = sampler.distribution(l);
    const double q_d = draft.q.empty() ? 1.0 : draft.q[i][d];
    if (sampler.uniform() * q_d < p[d]) {  // probability min(1, p(d) / q(d))
      out.push_back(d);
      continue;
    }
    // Rejected: draw from the residual max(0, p - q), renormalised (q one-hot when deterministic).
    double sum = 0;
    for (int64_t x = 0; x < vocab; ++x) {
      const double q = draft.q.empty() ? (x == d ? 1.0 : 0.0) : draft.q[i][x];
      p[x] = std::max(0.0, p[x] - q);
      sum += p[x];
    }
    if (sum <= 0) p = sampler.distribution(l);  // p == q: rejection had probability 0
    else for (double& v : p) v /= sum;
    out.push_back(sampler.draw(p));
    return out;
  }
  out.push_back(sampler.sample(row(logits, k, vocab)));  // every guess held: the target's next token
  return out;
}

SpeculativeDecoder::SpeculativeDecoder(Session& target, Drafter* drafter, Sampler& sampler, int64_t vocab,
                                       const SpeculativeOptions& o)
    : target_(target), drafter_(drafter), sampler_(sampler), vocab_(vocab), options_(o),
      pass_seconds_(static_cast<size_t>(std::max(o.max_k, 0)) + 2, 0.0), pass_pairs_(pass_seconds_.size(), 0.0),
      window_(std::max(o.max_k, 0) + 1) {
  if (drafter_) drafter_->bind(target_);
}

double SpeculativeDecoder::expected_pairs(int positions) const {
  if (!pairs_known_) return positions;  // the session does not say: every position its own experts
  if (pass_pairs_[positions] > 0 && positions > 1) return pass_pairs_[positions];
  const double estimate = window_.expected_pairs(positions);
  return estimate > 0 ? estimate : pass_pairs_[1] * positions;
}

PassPrices SpeculativeDecoder::prices() const {
  PassPrices p;
  p.plain_seconds = pass_seconds_[1];
  p.measured = pass_seconds_;
  p.read_bytes.assign(pass_seconds_.size(), 0.0);
  const double per_pair = std::max(read_per_pair_, 0.0);
  for (size_t n = 1; n < p.read_bytes.size(); ++n)
    p.read_bytes[n] = plain_spine_bytes_ + expected_pairs(static_cast<int>(n)) * per_pair;
  const double read1 = p.read_bytes[1];
  p.seconds_per_byte = read1 > 0 ? p.plain_seconds / read1 : 0;
  // C: what the measured widths leave unexplained by their extra reads, per extra position.
  double c = 0;
  int widths = 0;
  for (size_t n = 2; n < pass_seconds_.size(); ++n)
    if (pass_seconds_[n] > 0) {
      const double reads = (p.read_bytes[n] - read1) * p.seconds_per_byte;
      c += (pass_seconds_[n] - p.plain_seconds - reads) / static_cast<double>(n - 1), ++widths;
    }
  p.position_seconds = widths ? std::max(0.0, c / widths) : read1 > 0 ? 0 : p.plain_seconds / 3.0;
  return p;
}

int SpeculativeDecoder::choose_k() {
  shadow_ = false;
  if (!drafter_ || options_.max_k <= 0) return 0;
  if (!options_.adaptive) return options_.max_k;
  if (off_) {
    if (++since_probe_ < probe_every_) return 0;
    since_probe_ = 0;
    ++stats_.probes;
  }
  // Plain steps that learn first (and, while speculating, keep t(1) current): the drafter guesses
  // alongside ("shadow" guesses, checked against the token the target commits), which measures
  // acceptance without spending target reads on guesses.
  // A drafter with a confidence head is trusted from its first guesses (calibrated as outcomes come).
  if (pass_seconds_[1] <= 0 || (!has_confidence_ && outcomes_.size() < kMinOutcomes) ||
      (!off_ && ++since_plain_ >= kPlainEvery)) {
    since_plain_ = 0;
    shadow_ = true;
    return 0;
  }
  const std::vector<double> accept(static_cast<size_t>(options_.max_k), acceptance());
  const PassPrices p = prices();
  std::vector<double> extra = replay_seconds(p, accept);
  for (size_t k = 1; k < extra.size(); ++k)
    extra[k] += has_confidence_ ? draft_call_seconds_ : static_cast<double>(k) * draft_token_seconds_;
  const int best = best_width(p, expected_committed(accept), extra, kExploreGain).k;
  if (best == 0) {
    if (off_) probe_every_ = std::min(2 * probe_every_, kLastProbe);  // still not paying: wait longer
    off_ = true;
    shadow_ = true;
    return 0;
  }
  off_ = false;
  probe_every_ = kFirstProbe;
  return has_confidence_ ? options_.max_k : best;  // a block drafter's confidences cut it afterwards
}

int32_t SpeculativeDecoder::cut_by_confidence(Draft& draft) {
  if (!options_.adaptive || draft.confidence.size() != draft.tokens.size()) return -1;
  const std::vector<double> accept = calibrated(draft.confidence, confident_);
  const PassPrices p = prices();  // the draft is made: its time is spent, only replays count
  const size_t k = static_cast<size_t>(best_width(p, expected_committed(accept), replay_seconds(p, accept), kExploreGain).k);
  if (k >= draft.tokens.size()) return -1;
  ++stats_.confidence_cuts;
  if (k == 0) return draft.tokens.front();
  draft.tokens.resize(k);
  draft.confidence.resize(k);
  if (!draft.q.empty()) draft.q.resize(k);
  return -1;
}

std::vector<double> SpeculativeDecoder::replay_seconds(const PassPrices& p, std::span<const double> accept) const {
  std::vector<double> out = expected_replayed(accept);
  const double position = std::max(0.0, pass_seconds(p, 2) - p.plain_seconds);  // one more position in a pass
  for (double& r : out) r = replays_ ? r * position : 0.0;
  return out;
}

void SpeculativeDecoder::learn_draft(size_t guesses, double seconds) {
  if (guesses == 0) return;
  const auto average = [](double& a, double v) { a = a > 0 ? (1 - kAverage) * a + kAverage * v : v; };
  average(draft_token_seconds_, seconds / static_cast<double>(guesses));
  average(draft_call_seconds_, seconds);
}

void SpeculativeDecoder::learn(int positions, double seconds, int drafted, int accepted,
                               const std::vector<double>& confidence, StorageReads read, const PassExperts& experts,
                               int64_t start) {
  const auto average = [](double& a, double v, bool first) { a = first ? v : (1 - kAverage) * a + kAverage * v; };
  // Priced by the positions the pass ran: a K3 session replays what a rejection left in the next pass.
  pairs_known_ = experts.positions > 0;
  const int ran = pairs_known_ ? static_cast<int>(experts.positions) : positions;
  replays_ = replays_ || ran > positions;
  if (static_cast<size_t>(ran) >= pass_seconds_.size()) pass_seconds_.resize(ran + 1, 0.0), pass_pairs_.resize(ran + 1, 0.0);
  double& t = pass_seconds_[ran];
  const bool first = t <= 0;
  average(t, seconds, first);
  const double pairs = pairs_known_ ? static_cast<double>(experts.pairs.size()) : ran;
  if (pairs > 0) average(read_per_pair_, static_cast<double>(read.experts) / pairs, read_per_pair_ < 0);
  if (pairs_known_) average(pass_pairs_[ran], pairs, pass_pairs_[ran] <= 0);
  if (ran == 1) {
    average(plain_spine_bytes_, static_cast<double>(read.spine), first);
    if (pairs_known_) window_.add(start, experts.pairs);
  }
  // Guesses the target judged: those up to and including the first rejection.
  for (int i = 0; i < std::min(drafted, accepted + 1); ++i) observe(i < accepted, confidence, static_cast<size_t>(i));
}

void SpeculativeDecoder::observe(bool accepted, const std::vector<double>& confidence, size_t i) {
  outcomes_.push_back(accepted);
  if (outcomes_.size() > kWindow) outcomes_.pop_front();
  if (i >= confidence.size()) return;
  confident_.emplace_back(confidence[i], accepted);
  if (confident_.size() > kWindow) confident_.pop_front();
}

double SpeculativeDecoder::acceptance() const {
  const auto accepted = std::count(outcomes_.begin(), outcomes_.end(), true);
  return (static_cast<double>(accepted) + 1) / (static_cast<double>(outcomes_.size()) + 2);
}

std::vector<int32_t> SpeculativeDecoder::step(std::span<const int32_t> context) {
  const int k = choose_k();
  Draft draft;
  int32_t shadow = -1;  // a guess checked against the committed token, not verified in the pass
  std::vector<double> shadow_confidence;
  if (k > 0 || shadow_) {
    const auto t0 = Clock::now();
    draft = drafter_->propose(context, std::max(k, 1));
    const double draft_seconds = since(t0);
    stats_.draft_seconds += draft_seconds;
    learn_draft(draft.tokens.size(), draft_seconds);
    if (!draft.tokens.empty() && draft.confidence.size() == draft.tokens.size()) has_confidence_ = true;
    if (k > 0) shadow = cut_by_confidence(draft);
    else if (!draft.tokens.empty()) shadow = draft.tokens.front();
    if (shadow >= 0) {
      if (!draft.confidence.empty()) shadow_confidence = {draft.confidence.front()};
      draft = Draft{};
    }
  }
  const int64_t start = target_.position();
  std::vector<int32_t> pass{context.back()};
  pass.insert(pass.end(), draft.tokens.begin(), draft.tokens.end());
  const StorageReads before = target_.storage_reads();
  const auto t1 = Clock::now();
  const std::vector<float> logits = target_.append(pass, true, pass.size() == 1 ? PassKind::Decode : PassKind::Verify);
  double seconds = since(t1);
  const StorageReads after = target_.storage_reads();
  const PassExperts experts = target_.last_pass_experts();
  const std::vector<int32_t> committed = verify_drafts(draft, logits, vocab_, sampler_);
  const int accepted = static_cast<int>(committed.size()) - 1;
  if (accepted < static_cast<int>(draft.tokens.size())) {
    const auto t2 = Clock::now();
    target_.rewind(start + 1 + accepted);
    seconds += since(t2);  // a replay that does not wait for the next pass runs here
  }

  stats_.target_seconds += seconds;
  ++stats_.steps;
  stats_.committed += committed.size();
  if (!draft.tokens.empty()) {
    ++stats_.verify_passes;
    stats_.drafted += draft.tokens.size();
    stats_.accepted += accepted;
  }
  learn(static_cast<int>(pass.size()), seconds, static_cast<int>(draft.tokens.size()), accepted, draft.confidence,
        {after.spine - before.spine, after.experts - before.experts}, experts, start);
  if (shadow >= 0) {
    observe(committed.front() == shadow, shadow_confidence, 0);
    ++stats_.shadow_guesses;
    stats_.shadow_accepted += committed.front() == shadow;
  }
  stats_.off = off_;
  return committed;
}

}  // namespace deltafin
