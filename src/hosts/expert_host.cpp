// serve_experts (see expert_host.hpp).
#include "hosts/expert_host.hpp"

#include <chrono>
#include <algorithm>

#include "backend/scratch.hpp"
#include "hosts/local_run.hpp"
#include "hosts/wire.hpp"
#include "model/routed_experts.hpp"
#include "util/error.hpp"

namespace deltafin::hosts {
namespace {

using Clock = std::chrono::steady_clock;

// An idle server's host waits this long between checks that the run still goes on (mpirun ends
// a host whose rank 0 is gone).
constexpr double kIdleWait = 3600;

class ExpertHost {
 public:
  ExpertHost(HostGroup& group, Backend& backend, ExpertStore& store)
      : group_(group), backend_(backend), store_(store), local_(backend, store), scratch_(backend) {}

  // true when stopped
  bool handle(Message& m) {
    if (auto* q = std::get_if<Request>(&m)) {
      if (q->layer <= last_layer_) store_.begin_pass();
      last_layer_ = q->layer;
      store_.request(q->layer, q->experts, q->first);
      request_ = std::move(*q);
      return false;
    }
    if (auto* r = std::get_if<Run>(&m)) {
      run(*r);
      return false;
    }
    if (std::holds_alternative<Stop>(m)) return true;
    fail("rank 0 sent a message an expert host does not take");
  }

 private:
  void run(const Run& r) {
    const auto start = Clock::now();
    if (r.layer != request_.layer || r.experts != request_.experts)
      fail("rank 0 asked to run layer {} ({} experts) after requesting layer {} ({} experts)", r.layer, r.experts.size(),
           request_.layer, request_.experts.size());
    const Scratch::Mark frame = scratch_.mark();
    const Tensor x = scratch_.take(r.n, r.in), ids = scratch_.take(r.n, r.k, Elem::I32);
    backend_.upload(r.x.data(), *x.buffer, x.offset, r.x.size() * 4);
    backend_.upload(r.ids.data(), *ids.buffer, ids.offset, r.ids.size() * 4);
    const ExpertWork work = prepare_experts(backend_, scratch_, x, ids, r.all, r.width, r.act);
    std::vector<int64_t> rows;  // each expert's row of the lists: its place in the union
    for (int32_t e : r.experts) rows.push_back(std::lower_bound(r.all.begin(), r.all.end(), e) - r.all.begin());
    const FailedExperts failed = run_local(local_, r.layer, r.experts, rows, request_.first, work);
    Result out;
    out.layer = r.layer, out.in = r.in, out.failed = failed.experts, out.failure = failed.message;
    out.slots = result_slots(r.ids, r.experts, failed.experts);
    out.rows.resize(out.slots.size() * static_cast<size_t>(r.in));
    for (size_t i = 0; i < out.slots.size();) {  // contiguous slots in one download
      size_t j = i + 1;
      while (j < out.slots.size() && out.slots[j] == out.slots[j - 1] + 1) ++j;
      backend_.download(work.y.row_range(out.slots[i], static_cast<int64_t>(j - i)), out.rows.data() + i * r.in);
      i = j;
    }
    scratch_.release(frame);
    busy_ += std::chrono::duration<double>(Clock::now() - start).count();
    ++runs_;
    out.counters = counters();
    group_.send(0, encode(out));
  }

  HostCounters counters() const {
    const ExpertStoreStats s = store_.stats();
    HostCounters c;
    c.expert_bytes_read = s.bytes_read, c.hits = s.hits, c.misses = s.misses, c.runs = runs_;
    c.busy_seconds = busy_, c.io_wait_seconds = s.wait_seconds;
    c.bytes_sent = group_.bytes_sent(), c.bytes_received = group_.bytes_received();
    c.cache_budget_bytes = store_.budget_bytes();
    c.drive_busy_seconds = store_.reader().shard_drive_stats().busy_seconds;
    for (const DriveStats& d : store_.reader().drive_stats()) c.drive_busy_seconds = std::max(c.drive_busy_seconds, d.busy_seconds);
    return c;
  }

  HostGroup& group_;
  Backend& backend_;
  ExpertStore& store_;
  LocalExperts local_;
  Scratch scratch_;
  Request request_;
  int64_t last_layer_ = -1;
  double busy_ = 0;
  uint64_t runs_ = 0;
};

}  // namespace

int serve_experts(HostGroup& group, Backend& backend, ExpertStore& store) {
  ExpertHost host(group, backend, store);
  try {
    for (;;) {
      const auto got = group.receive(0, kIdleWait);
      if (!got) continue;
      Message m = decode(got->bytes, 0);
      if (host.handle(m)) return 0;
    }
  } catch (const std::exception& e) {
    group.send(0, encode(Failure{e.what()}));
    group.flush(60);
    // Rank 0 stops everyone once it reads the Failure; wait for its Stop (bounded).
    for (int i = 0; i < 60; ++i) {
      const auto got = group.receive(0, 1);
      if (got && std::holds_alternative<Stop>(decode(got->bytes, 0))) break;
    }
    return 1;
  }
}

}  // namespace deltafin::hosts
