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
      pass_seconds_(static_cast<size_t>(std::max(o.max_k, 0)) + 2, 0.0) {}

double SpeculativeDecoder::pass_seconds(int positions) const {
  if (pass_seconds_[positions] > 0) return pass_seconds_[positions];
  // Not measured yet: extrapolate from the nearest measured smaller pass, each extra position
  // costing a third of a one-position pass (the union of experts grows almost linearly).
  for (int n = positions - 1; n >= 1; --n) {
    if (pass_seconds_[n] <= 0) continue;
    const double per_position = (pass_seconds_[1] > 0 ? pass_seconds_[1] : pass_seconds_[n]) / 3.0;
    return pass_seconds_[n] + (positions - n) * per_position;
  }
  return 0;
}

int SpeculativeDecoder::choose_k() {
  if (!drafter_ || options_.max_k <= 0) return 0;
  if (!options_.adaptive) return options_.max_k;
  if (off_) {
    if (++since_probe_ < kProbeEvery) return 0;
    since_probe_ = 0;
    ++stats_.probes;
    return 1;
  }
  if (pass_seconds_[1] <= 0) return pass_seconds_[2] <= 0 ? 1 : 0;  // measure both ends first
  // Tokens per second with k guesses: E(k) = sum_{i<=k} alpha^i tokens for one pass of k+1
  // positions plus k draft steps.
  int best = 0;
  double best_rate = 1.0 / pass_seconds_[1];
  double expected = 1.0;
  for (int k = 1; k <= options_.max_k; ++k) {
    expected += std::pow(alpha_, k);
    const double rate = expected / (pass_seconds(k + 1) + k * draft_token_seconds_);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  if (best == 0) {
    off_ = true;
    since_probe_ = 0;
  }
  return best;
}

void SpeculativeDecoder::learn(int positions, double seconds, int drafted, int accepted, double draft_seconds) {
  double& t = pass_seconds_[positions];
  t = t > 0 ? (1 - kAverage) * t + kAverage * seconds : seconds;
  if (drafted > 0) {
    for (int i = 0; i < drafted; ++i) alpha_ = (1 - kAverage) * alpha_ + kAverage * (i < accepted ? 1.0 : 0.0);
    const double per_token = draft_seconds / drafted;
    draft_token_seconds_ = draft_token_seconds_ > 0 ? (1 - kAverage) * draft_token_seconds_ + kAverage * per_token : per_token;
    if (off_ && accepted == drafted) off_ = false;  // a probe that fully paid: try again
  }
}

std::vector<int32_t> SpeculativeDecoder::step(std::span<const int32_t> context) {
  const int k = choose_k();
  Draft draft;
  double draft_seconds = 0;
  if (k > 0) {
    const auto t0 = Clock::now();
    draft = drafter_->propose(context, k);
    draft_seconds = since(t0);
    stats_.draft_seconds += draft_seconds;
  }
  const int64_t start = target_.position();
  std::vector<int32_t> pass{context.back()};
  pass.insert(pass.end(), draft.tokens.begin(), draft.tokens.end());
  const auto t1 = Clock::now();
  const std::vector<float> logits = target_.append(pass, true);
  const double seconds = since(t1);
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
  learn(static_cast<int>(pass.size()), seconds, static_cast<int>(draft.tokens.size()), accepted, draft_seconds);
  return committed;
}

}  // namespace deltafin
