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
      pass_seconds_(static_cast<size_t>(std::max(o.max_k, 0)) + 2, 0.0) {
  if (drafter_) drafter_->bind(target_);
}

double SpeculativeDecoder::pass_seconds(int positions) const {
  // t(n) = t(1) + (n - 1) * slope, the slope averaged over every measured wider pass, so one
  // measurement informs every width. Before any: the share of a plain pass's reads that grows with
  // the width (experts, per position; the streamed spine is read once a pass whatever its width)
  // times t(1), reads taken to dominate a pass that reads at all; with no reads, t(1) / 3.
  const double t1 = pass_seconds_[1];
  double slope = 0;
  int measured = 0;
  for (size_t n = 2; n < pass_seconds_.size(); ++n)
    if (pass_seconds_[n] > 0) slope += (pass_seconds_[n] - t1) / static_cast<double>(n - 1), ++measured;
  const double read = plain_spine_bytes_ + plain_expert_bytes_;
  slope = measured ? std::max(0.0, slope / measured) : read > 0 ? t1 * plain_expert_bytes_ / read : t1 / 3.0;
  return t1 + (positions - 1) * slope;
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
  if (pass_seconds_[1] <= 0 || outcomes_.size() < kMinOutcomes || (!off_ && ++since_plain_ >= kPlainEvery)) {
    since_plain_ = 0;
    shadow_ = true;
    return 0;
  }
  // Tokens per second with k guesses: E(k) = sum_{i<=k} alpha^i tokens for one pass of k+1
  // positions plus k draft steps; k = 0 is a plain step.
  int best = 0;
  double best_rate = 1.0 / pass_seconds_[1];
  double expected = 1.0;
  const double alpha = acceptance();
  for (int k = 1; k <= options_.max_k; ++k) {
    expected += std::pow(alpha, k);
    const double rate = expected / (pass_seconds(k + 1) + k * draft_token_seconds_);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  // A width never measured is only tried when the prior promises a clear gain.
  if (best > 0 && pass_seconds_[best + 1] <= 0 && best_rate * pass_seconds_[1] < kExploreGain) best = 0;
  if (best == 0) {
    if (off_) probe_every_ = std::min(2 * probe_every_, kLastProbe);  // still not paying: wait longer
    off_ = true;
    shadow_ = true;
    return 0;
  }
  off_ = false;
  probe_every_ = kFirstProbe;
  return best;
}

void SpeculativeDecoder::learn(int positions, double seconds, int drafted, int accepted, double draft_seconds,
                               StorageReads read) {
  double& t = pass_seconds_[positions];
  const bool first = t <= 0;
  const auto average = [first](double& a, double v) { a = first ? v : (1 - kAverage) * a + kAverage * v; };
  average(t, seconds);
  if (positions == 1) {
    average(plain_spine_bytes_, static_cast<double>(read.spine));
    average(plain_expert_bytes_, static_cast<double>(read.experts));
  }
  if (drafted > 0) {
    for (int i = 0; i < drafted; ++i) observe(i < accepted);
    const double per_token = draft_seconds / drafted;
    draft_token_seconds_ = draft_token_seconds_ > 0 ? (1 - kAverage) * draft_token_seconds_ + kAverage * per_token : per_token;
  }
}

void SpeculativeDecoder::observe(bool accepted) {
  outcomes_.push_back(accepted);
  if (outcomes_.size() > kWindow) outcomes_.pop_front();
}

double SpeculativeDecoder::acceptance() const {
  const auto accepted = std::count(outcomes_.begin(), outcomes_.end(), true);
  return (static_cast<double>(accepted) + 1) / (static_cast<double>(outcomes_.size()) + 2);
}

std::vector<int32_t> SpeculativeDecoder::step(std::span<const int32_t> context) {
  const int k = choose_k();
  Draft draft;
  double draft_seconds = 0;
  int32_t shadow = -1;  // a guess checked against the committed token, not verified in the pass
  if (k > 0 || shadow_) {
    const auto t0 = Clock::now();
    draft = drafter_->propose(context, std::max(k, 1));
    draft_seconds = since(t0);
    stats_.draft_seconds += draft_seconds;
    if (k == 0) {
      if (!draft.tokens.empty()) shadow = draft.tokens.front();
      draft = Draft{};
    }
  }
  const int64_t start = target_.position();
  std::vector<int32_t> pass{context.back()};
  pass.insert(pass.end(), draft.tokens.begin(), draft.tokens.end());
  const StorageReads before = target_.storage_reads();
  const auto t1 = Clock::now();
  const std::vector<float> logits = target_.append(pass, true, pass.size() == 1 ? PassKind::Decode : PassKind::Verify);
  const double seconds = since(t1);
  const StorageReads after = target_.storage_reads();
  const std::vector<int32_t> committed = verify_drafts(draft, logits, vocab_, sampler_);
  const int accepted = static_cast<int>(committed.size()) - 1;
  if (accepted < static_cast<int>(draft.tokens.size())) target_.rewind(start + 1 + accepted);

  stats_.target_seconds += seconds;
  ++stats_.steps;
  stats_.committed += committed.size();
  if (!draft.tokens.empty()) {
    ++stats_.verify_passes;
    stats_.drafted += draft.tokens.size();
    stats_.accepted += accepted;
  }
  learn(static_cast<int>(pass.size()), seconds, static_cast<int>(draft.tokens.size()), accepted, draft_seconds,
        {after.spine - before.spine, after.experts - before.experts});
  if (shadow >= 0) {
    observe(committed.front() == shadow);
    ++stats_.shadow_guesses;
    stats_.shadow_accepted += committed.front() == shadow;
  }
  stats_.off = off_;
  return committed;
}

}  // namespace deltafin
