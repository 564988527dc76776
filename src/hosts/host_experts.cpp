// HostExperts (see host_experts.hpp).
#include "hosts/host_experts.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <numeric>

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
  Run r;
  r.layer = layer, r.n = n_, r.k = k_, r.in = work.x.cols, r.width = work.width, r.act = work.act;
  r.experts = share.experts, r.all = union_, r.ids = ids_, r.x = x_;
  Bytes b = encode(r);
  reports_[host].bytes_to += b.size();
  reports_[host].experts += share.experts.size();
  sent_at_[host] = Clock::now();
  group_.send(host, std::move(b));
}

void HostExperts::run(int64_t layer, std::span<const int32_t> experts, const ExpertWork& work) {
  if (layer != pass_layer_) fail("hosts: layer {} run before it was requested (last requested: {})", layer, pass_layer_);
  n_ = work.x.rows, k_ = work.ids.cols;
  union_.assign(experts.begin(), experts.end());
  std::vector<Share> waiting(group_.size());
  const bool remote = std::any_of(pass_.begin() + 1, pass_.end(), [](const Share& s) { return !s.experts.empty(); });
  if (remote) {
    ids_.resize(static_cast<size_t>(n_ * k_));
    x_.resize(static_cast<size_t>(n_ * work.x.cols));
    backend_.download(work.ids, ids_.data());
    backend_.download(work.x, x_.data());
  }
  for (int h = 1; h < group_.size(); ++h)
    if (!pass_[h].experts.empty()) send_run(h, layer, pass_[h], work), waiting[h] = pass_[h];
  reports_[0].experts += pass_[0].experts.size();
  FailedExperts mine = run_local(local_, layer, pass_[0].experts, pass_[0].rows, pass_[0].first, work);
  std::vector<Share> failed = collect(layer, waiting, work);
  if (!mine.message.empty()) why_ = mine.message;
  for (int32_t e : mine.experts) {  // this host's failures join the others'
    const size_t i = std::lower_bound(pass_[0].experts.begin(), pass_[0].experts.end(), e) - pass_[0].experts.begin();
    failed[0].experts.push_back(e), failed[0].rows.push_back(pass_[0].rows[i]), failed[0].first.push_back(pass_[0].first[i]);
  }
  // Each round, every failed expert loses a holder, so this ends.
  while (std::any_of(failed.begin(), failed.end(), [](const Share& s) { return !s.experts.empty(); })) {
    Share all;
    for (int h = 0; h < group_.size(); ++h)
      for (size_t i = 0; i < failed[h].experts.size(); ++i) {
        if (!reports_[h].failed_over++)
          spdlog::warn("{} could not read layer {} expert {} ({}); another host runs it, and so on for each expert it cannot read",
                       label(h), layer, failed[h].experts[i], why_.empty() ? "see its drives" : why_);
        owners_.lose(h, layer, failed[h].experts[i]);
        if (owners_.owner(layer, failed[h].experts[i]) < 0)
          fail("layer {} expert {}: {} could not read it ({}), and no other host holds it", layer, failed[h].experts[i],
               label(h), why_.empty() ? "see its drives" : why_);
        all.experts.push_back(failed[h].experts[i]), all.rows.push_back(failed[h].rows[i]), all.first.push_back(failed[h].first[i]);
      }
    std::vector<size_t> order(all.experts.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all.experts[a] < all.experts[b]; });
    Share sorted;
    for (size_t i : order)
      sorted.experts.push_back(all.experts[i]), sorted.rows.push_back(all.rows[i]), sorted.first.push_back(all.first[i]);
    std::vector<Share> again = split(layer, sorted.experts, sorted.rows, sorted.first);
    std::fill(waiting.begin(), waiting.end(), Share{});
    for (int h = 1; h < group_.size(); ++h)
      if (!again[h].experts.empty()) {
        send_request(h, layer, again[h]);
        send_run(h, layer, again[h], work);
        waiting[h] = again[h];
      }
    local_.request(layer, again[0].experts, again[0].first);
    mine = run_local(local_, layer, again[0].experts, again[0].rows, again[0].first, work);
    failed = collect(layer, waiting, work);
    if (!mine.message.empty()) why_ = mine.message;
    failed[0] = Share{};
    for (size_t i = 0; i < mine.experts.size(); ++i) {
      const size_t j = std::lower_bound(again[0].experts.begin(), again[0].experts.end(), mine.experts[i]) - again[0].experts.begin();
      failed[0].experts.push_back(mine.experts[i]), failed[0].rows.push_back(again[0].rows[j]), failed[0].first.push_back(again[0].first[j]);
    }
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
    std::vector<int32_t> expected;
    for (int64_t s = 0; s < n_ * k_; ++s) {
      const int32_t e = ids_[static_cast<size_t>(s)];
      if (std::binary_search(share.experts.begin(), share.experts.end(), e) &&
          !std::binary_search(result->failed.begin(), result->failed.end(), e))
        expected.push_back(static_cast<int32_t>(s));
    }
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
    for (int32_t e : result->failed) {
      const auto at = std::lower_bound(share.experts.begin(), share.experts.end(), e);
      if (at == share.experts.end() || *at != e) fail("{} reports expert {} of layer {} failed, which it was not asked for", label(h), e, layer);
      const size_t i = at - share.experts.begin();
      failed[h].experts.push_back(e), failed[h].rows.push_back(share.rows[i]), failed[h].first.push_back(share.first[i]);
    }
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
