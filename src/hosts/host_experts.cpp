// HostExperts (see host_experts.hpp).
#include "hosts/host_experts.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <numeric>
#include <tuple>

#include "hosts/handshake.hpp"
#include "hosts/local_run.hpp"
#include "util/error.hpp"

namespace deltafin::hosts {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

HostExperts::HostExperts(Backend& backend, ExpertStore& store, HostGroup& group, ExpertOwners owners,
                         std::vector<std::string> names, double timeout, int64_t layers, int64_t experts)
    : local_(backend, store), backend_(backend), group_(group), owners_(std::move(owners)), names_(std::move(names)),
      timeout_(timeout), reports_(group.size()), pass_(group.size()), sent_at_(group.size()),
      usage_(static_cast<size_t>(layers)), experts_(experts) {
  for (int h = 0; h < group.size(); ++h) reports_[h].rank = h, reports_[h].name = names_[h];
}

HostExperts::~HostExperts() {
  // Unwinding from an error: main ends every rank at once (a hung host would not take a Stop).
  if (std::uncaught_exceptions() > 0) return;
  for (int h = 1; h < group_.size(); ++h) group_.send(h, encode(Stop{}));
  group_.flush(5);
}

std::string HostExperts::label(int host) const { return host_label(names_[host], host); }

std::vector<HostExperts::Share> HostExperts::split(int64_t layer, std::span<const int32_t> experts,
                                                   std::span<const int64_t> rows, std::span<const int64_t> first) const {
  std::vector<Share> shares(group_.size());
  const std::vector<int> hosts = owners_.balance(layer, experts);
  for (size_t i = 0; i < experts.size(); ++i) {
    const int h = hosts[i];
    if (h < 0) fail("layer {} expert {}: no host can read it (every host holding it failed)", layer, experts[i]);
    shares[h].experts.push_back(experts[i]);
    shares[h].rows.push_back(rows[i]);
    shares[h].first.push_back(first[i]);
  }
  return shares;
}

void HostExperts::request(int64_t layer, std::span<const int32_t> experts, std::span<const int64_t> first_positions) {
  std::vector<int64_t> rows(experts.size());
  std::iota(rows.begin(), rows.end(), 0);
  pass_ = split(layer, experts, rows, first_positions);
  std::vector<uint64_t>& used = usage_.at(static_cast<size_t>(layer));
  if (used.empty()) used.resize(static_cast<size_t>(experts_));  // rows of dense layers stay empty
  for (int32_t e : experts) ++used.at(static_cast<size_t>(e));
  pass_layer_ = layer;
  local_.request(layer, pass_[0].experts, pass_[0].first);
  for (int h = 1; h < group_.size(); ++h)
    if (!pass_[h].experts.empty()) send_request(h, layer, pass_[h]);
}

void HostExperts::send_request(int host, int64_t layer, const Share& share) {
  Bytes b = encode(Request{layer, share.experts, share.first});
  reports_[host].bytes_to += b.size();
  group_.send(host, std::move(b));
}

void HostExperts::send_run(int host, int64_t layer, const Share& share, const ExpertWork& work) {
  if (ids_.empty()) {  // the pass's routing and rows, downloaded once a run, when a host first needs them
    ids_.resize(static_cast<size_t>(n_ * k_));
    x_.resize(static_cast<size_t>(n_ * work.x.cols));
    backend_.download(work.ids, ids_.data());
    backend_.download(work.x, x_.data());
  }
  Run r;
  r.layer = layer, r.n = n_, r.k = k_, r.in = work.x.cols, r.width = work.width, r.act = work.act;
  r.experts = share.experts, r.all = union_, r.ids = ids_, r.x = x_;
  Bytes b = encode(r);
  reports_[host].bytes_to += b.size();
  reports_[host].experts += share.experts.size();
  sent_at_[host] = Clock::now();
  group_.send(host, std::move(b));
}

HostExperts::Share HostExperts::pick(const Share& share, std::span<const int32_t> experts) {
  Share out;
  for (int32_t e : experts) {
    const auto at = std::lower_bound(share.experts.begin(), share.experts.end(), e);
    if (at == share.experts.end() || *at != e) fail("hosts: expert {} is not one of the share's", e);
    const size_t i = static_cast<size_t>(at - share.experts.begin());
    out.experts.push_back(e), out.rows.push_back(share.rows[i]), out.first.push_back(share.first[i]);
  }
  return out;
}

std::vector<HostExperts::Share> HostExperts::dispatch(int64_t layer, const std::vector<Share>& shares, const ExpertWork& work,
                                                      bool requested) {
  std::vector<Share> waiting(group_.size());
  for (int h = 1; h < group_.size(); ++h)
    if (!shares[h].experts.empty()) {
      if (!requested) send_request(h, layer, shares[h]);
      send_run(h, layer, shares[h], work);
      waiting[h] = shares[h];
    }
  if (!requested) local_.request(layer, shares[0].experts, shares[0].first);
  reports_[0].experts += shares[0].experts.size();
  const FailedExperts mine = run_local(local_, layer, shares[0].experts, shares[0].rows, shares[0].first, work);
  if (!mine.message.empty()) why_ = mine.message;
  std::vector<Share> failed = collect(layer, waiting, work);
  failed[0] = pick(shares[0], mine.experts);
  return failed;
}

void HostExperts::run(int64_t layer, std::span<const int32_t> experts, const ExpertWork& work) {
  if (layer != pass_layer_) fail("hosts: layer {} run before it was requested (last requested: {})", layer, pass_layer_);
  n_ = work.x.rows, k_ = work.ids.cols;
  union_.assign(experts.begin(), experts.end());
  ids_.clear(), x_.clear();
  std::vector<Share> failed = dispatch(layer, pass_, work, true);
  // Each round, every failed expert loses a holder, so this ends.
  while (std::any_of(failed.begin(), failed.end(), [](const Share& s) { return !s.experts.empty(); })) {
    std::vector<std::tuple<int32_t, int64_t, int64_t>> lost;  // expert, lists row, first position
    for (int h = 0; h < group_.size(); ++h)
      for (size_t i = 0; i < failed[h].experts.size(); ++i) {
        const int32_t e = failed[h].experts[i];
        if (!reports_[h].failed_over++)
          spdlog::warn("{} could not read layer {} expert {} ({}); another host runs it, and so on for each expert it cannot read",
                       label(h), layer, e, why_.empty() ? "see its drives" : why_);
        owners_.lose(h, layer, e);
        if (owners_.owner(layer, e) < 0)
          fail("layer {} expert {}: {} could not read it ({}), and no other host holds it", layer, e, label(h),
               why_.empty() ? "see its drives" : why_);
        lost.emplace_back(e, failed[h].rows[i], failed[h].first[i]);
      }
    std::sort(lost.begin(), lost.end());
    Share again;
    for (const auto& [e, row, first] : lost) again.experts.push_back(e), again.rows.push_back(row), again.first.push_back(first);
    failed = dispatch(layer, split(layer, again.experts, again.rows, again.first), work, false);
  }
}

std::vector<HostExperts::Share> HostExperts::collect(int64_t layer, std::vector<Share>& waiting, const ExpertWork& work) {
  std::vector<Share> failed(group_.size());
  const auto start = Clock::now();
  const int64_t in = work.x.cols;
  int left = 0;
  for (int h = 1; h < group_.size(); ++h) left += waiting[h].experts.empty() ? 0 : 1;
  while (left > 0) {
    int oldest = -1;  // the pending host whose deadline comes first
    for (int h = 1; h < group_.size(); ++h)
      if (!waiting[h].experts.empty() && (oldest < 0 || sent_at_[h] < sent_at_[oldest])) oldest = h;
    const double remaining = timeout_ - seconds(Clock::now() - sent_at_[oldest]);
    const auto got = group_.receive(-1, std::max(remaining, 0.0));
    if (!got)
      fail("{} did not answer within {} s (layer {}): it hangs, died, or its link is down (--host-timeout)", label(oldest),
           timeout_, layer);
    const int h = got->from;
    Message m = decode(got->bytes, h);
    if (const auto* f = std::get_if<Failure>(&m)) fail("{}: {}", label(h), f->message);
    auto* result = std::get_if<Result>(&m);
    if (!result || h <= 0 || h >= group_.size() || waiting[h].experts.empty() || result->layer != layer || result->in != in)
      fail("{} sent a message rank 0 did not wait for (layer {})", label(h), layer);
    Share& share = waiting[h];
    // The slots of its experts, less those of the experts it could not read: exactly these come back.
    const std::vector<int32_t> expected = result_slots(ids_, share.experts, result->failed);
    if (result->slots != expected)
      fail("{} answered layer {} with {} rows where its experts have {}: it runs another model or placement", label(h), layer,
           result->slots.size(), expected.size());
    for (size_t i = 0; i < result->slots.size();) {  // contiguous slots in one upload
      size_t j = i + 1;
      while (j < result->slots.size() && result->slots[j] == result->slots[j - 1] + 1) ++j;
      backend_.upload(result->rows.data() + i * in, *work.y.buffer,
                      work.y.offset + static_cast<uint64_t>(result->slots[i]) * work.y.stride * 4,
                      static_cast<uint64_t>(j - i) * in * 4);
      i = j;
    }
    for (int32_t e : result->failed)
      if (!std::binary_search(share.experts.begin(), share.experts.end(), e))
        fail("{} reports expert {} of layer {} failed, which it was not asked for", label(h), e, layer);
    failed[h] = pick(share, result->failed);
    if (!result->failure.empty()) why_ = result->failure;
    HostReport& r = reports_[h];
    // What of rank 0's wait the network explains: the round trip less the host's work on this
    // Run, at most the wait itself (latency hidden behind rank 0's own experts costs nothing).
    const double trip = seconds(Clock::now() - sent_at_[h]), stall = seconds(Clock::now() - start);
    const double busy = result->counters.busy_seconds - r.counters.busy_seconds;
    r.network_seconds += std::clamp(trip - busy, 0.0, stall);
    r.counters = result->counters;
    r.round_trips += 1;
    r.round_trip_seconds += trip;
    r.stall_seconds += stall;
    r.bytes_from += got->bytes.size();
    share = Share{};
    --left;
  }
  return failed;
}

}  // namespace deltafin::hosts
