// The price of a verify pass and the choice of k (see verify_cost.hpp).
#include "decode/verify_cost.hpp"

#include <algorithm>

namespace deltafin {

void ExpertUnionWindow::add(int64_t position, std::vector<uint64_t> pairs) {
  if (max_width_ == 0) return;
  if (!recent_.empty() && recent_.back().first + 1 != position) recent_.clear();
  recent_.emplace_back(position, std::move(pairs));
  if (recent_.size() > max_width_) recent_.pop_front();
  std::vector<uint32_t> sizes;
  std::vector<uint64_t> u, merged;
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    merged.clear();
    std::set_union(u.begin(), u.end(), it->second.begin(), it->second.end(), std::back_inserter(merged));
    u.swap(merged);
    sizes.push_back(static_cast<uint32_t>(u.size()));
  }
  unions_.push_back(std::move(sizes));
  if (unions_.size() > kPositions) unions_.pop_front();
}

double ExpertUnionWindow::expected_pairs(int n) const {
  // mean[m - 1]: the mean union of m consecutive positions, over the windows held.
  std::vector<double> mean;
  for (size_t m = 1; m <= static_cast<size_t>(std::max(n, 1)); ++m) {
    double sum = 0;
    int count = 0;
    for (const auto& sizes : unions_)
      if (sizes.size() >= m) sum += sizes[m - 1], ++count;
    if (count == 0) break;
    mean.push_back(sum / count);
  }
  if (mean.empty()) return 0;
  const size_t m = mean.size();
  if (static_cast<size_t>(n) <= m) return mean[n - 1];
  const double step = m >= 2 ? std::max(0.0, mean[m - 1] - mean[m - 2]) : mean[0];
  return mean[m - 1] + static_cast<double>(static_cast<size_t>(n) - m) * step;
}

double pass_seconds(const PassPrices& p, int n) {
  if (n < static_cast<int>(p.measured.size()) && p.measured[n] > 0) return p.measured[n];
  if (n <= 1) return p.plain_seconds;
  const double extra = std::max(0.0, p.read_bytes[n] - p.read_bytes[1]);
  return p.plain_seconds + extra * p.seconds_per_byte + (n - 1) * p.position_seconds;
}

std::vector<double> expected_committed(std::span<const double> accept) {
  std::vector<double> out{1.0};
  double held = 1;  // probability that every guess so far holds
  for (double c : accept) {
    held *= std::clamp(c, 0.0, 1.0);
    out.push_back(out.back() + held);
  }
  return out;
}

std::vector<double> expected_replayed(std::span<const double> accept) {
  std::vector<double> out{0.0};
  double held = 1, replayed = 0;  // held: P(every guess so far holds)
  for (size_t a = 0; a < accept.size(); ++a) {
    const double c = std::clamp(accept[a], 0.0, 1.0);
    replayed += held * (1 - c) * static_cast<double>(a + 1);
    held *= c;
    out.push_back(replayed);
  }
  return out;
}

WidthChoice best_width(const PassPrices& p, std::span<const double> committed, std::span<const double> extra_seconds,
                       double explore_gain) {
  WidthChoice best{0, 1.0 / p.plain_seconds};
  for (size_t k = 1; k < committed.size(); ++k) {
    const int n = static_cast<int>(k) + 1;
    const double extra = k < extra_seconds.size() ? extra_seconds[k] : 0.0;
    const double rate = committed[k] / (pass_seconds(p, n) + extra);
    const bool measured = n < static_cast<int>(p.measured.size()) && p.measured[n] > 0;
    if (!measured && rate * p.plain_seconds < explore_gain) continue;
    if (rate > best.rate) best = {static_cast<int>(k), rate};
  }
  return best;
}

std::vector<double> calibrated(std::span<const double> confidence, const std::deque<std::pair<double, bool>>& window) {
  double predicted = 1, accepted = 1;
  for (const auto& [c, held] : window) predicted += c, accepted += held;
  const double scale = accepted / predicted;
  std::vector<double> out;
  for (double c : confidence) out.push_back(std::clamp(c * scale, 0.0, 1.0));
  return out;
}

}  // namespace deltafin
