// simulate_cache (see cache_simulator.hpp).
#include "io/cache_simulator.hpp"

#include <algorithm>
#include <unordered_map>

#include "util/error.hpp"

namespace deltafin {
namespace {

struct SimEntry {
  CacheMeta meta;
  bool wanted = false;  // requested by the running layer and not yet run
  bool read = false;    // its read has started (it holds a slot)
};

class SimStore {
 public:
  // log: where every request's (layer, expert) key goes, in request order (nullptr: nowhere).
  SimStore(const RoutingTraceHeader& h, const CacheSimOptions& o, std::vector<uint64_t>* log)
      : h_(h), o_(o), policy_(h.layers, h.experts, o.policy), log_(log) {
    const uint64_t records = h.moe_layers.size() * static_cast<uint64_t>(h.experts);
    slots_ = std::max<uint64_t>(1, std::min(o.budget_bytes / h.slot_bytes, records));
    if (o.budget_bytes < h.slot_bytes) fail("a budget of {} bytes cannot hold one expert ({} bytes)", o.budget_bytes, h.slot_bytes);
    r_.slots = slots_;
    r_.drive_bytes.assign(static_cast<size_t>(std::max(1, o.drives)), 0);
  }

  // A pass over positions start..start+n-1; layers[i]: its ids [n, top_k] at the i-th MoE layer.
  void pass(PassKind kind, int64_t start, int64_t n, const std::vector<const std::vector<uint16_t>*>& layers) {
    if (!o_.expert_host) begin_pass();
    ++r_.passes;
    decode_ = kind != PassKind::Prefill;
    if (decode_) r_.decode_positions += static_cast<uint64_t>(n);
    for (size_t li = 0; li < h_.moe_layers.size(); ++li) layer(h_.moe_layers[li], *layers[li], start);
  }

  // Positions >= position of the last pass were dropped (ExpertStore::demote_from; rank 0's only).
  void rewind(int64_t position) {
    if (o_.expert_host) return;
    for (const auto& [k, first] : first_position_) {
      if (first < position) continue;
      auto it = entries_.find(k);
      if (it != entries_.end() && !it->second.wanted) it->second.meta.cold = true;
    }
  }

  const CacheSimResult& result() const { return r_; }

 private:
  using Key = uint64_t;
  static Key key(int64_t layer, int64_t expert) { return static_cast<uint64_t>(layer) << 32 | static_cast<uint64_t>(expert); }

  void begin_pass() {
    policy_.begin_pass();
    first_position_.clear();
  }

  // ids: [n, top_k] of the pass at `layer`, whose first row is position `start`.
  void layer(int64_t layer, const std::vector<uint16_t>& ids, int64_t start) {
    const size_t k = static_cast<size_t>(h_.top_k);
    std::vector<int32_t> experts(ids.begin(), ids.end());
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    if (o_.share) experts = o_.share(layer, experts);
    if (o_.expert_host) {
      if (experts.empty()) return;  // rank 0 sends no request
      if (layer <= last_layer_) begin_pass();
      last_layer_ = layer;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!std::binary_search(experts.begin(), experts.end(), static_cast<int32_t>(ids[i]))) continue;
      const Key kk = key(layer, ids[i]);
      first_position_.try_emplace(kk, start + static_cast<int64_t>(i / k));
    }
    // ExpertStore::request
    policy_.at_layer(layer);
    std::vector<Key> queued;
    for (int32_t expert : experts) {
      const Key kk = key(layer, expert);
      if (log_) log_->push_back(kk);
      auto it = entries_.find(kk);
      if (it != entries_.end()) {
        ++r_.hits;
        it->second.wanted = true;
        policy_.requested(it->second.meta);
        continue;
      }
      ++r_.misses;
      SimEntry& e = entries_[kk];
      e.meta.layer = layer;
      e.meta.expert = expert;
      e.wanted = true;
      policy_.requested(e.meta);
      queued.push_back(kk);
    }
    size_t started = issue(queued, 0);
    // The layer runs its experts in ascending order; a read waiting for room starts as soon as
    // the experts before it have run (and can be evicted).
    for (int32_t expert : experts) {
      SimEntry& e = entries_.at(key(layer, expert));
      if (!e.read) {
        started = issue(queued, started);
        if (!e.read) fail("simulated store: expert {}/{} found no room (the budget is held by the running layer)", layer, expert);
      }
      e.wanted = false;
    }
  }

  // Starts queued reads from `from` on while room can be made; returns how many have started.
  size_t issue(const std::vector<Key>& queued, size_t from) {
    while (from < queued.size()) {
      while (held_ + 1 > slots_) {
        const auto victim = policy_.victim(entries_, [](const SimEntry& e) { return e.read && !e.wanted; });
        if (victim == entries_.end()) return from;
        entries_.erase(victim);
        --held_;
      }
      SimEntry& e = entries_.at(queued[from]);
      e.read = true;
      ++held_;
      r_.bytes_read += h_.record_bytes;
      if (decode_) r_.decode_bytes_read += h_.record_bytes;
      r_.drive_bytes[static_cast<size_t>(e.meta.expert % std::max(1, o_.drives))] += h_.record_bytes;
      ++from;
    }
    return from;
  }

  const RoutingTraceHeader& h_;
  const CacheSimOptions& o_;
  CachePolicy policy_;
  std::vector<uint64_t>* log_;
  uint64_t slots_ = 0, held_ = 0;
  int64_t last_layer_ = -1;  // an expert host's last requested layer
  bool decode_ = false;
  std::unordered_map<Key, SimEntry> entries_;
  std::unordered_map<Key, int64_t> first_position_;
  CacheSimResult r_;
};

CacheSimResult replay(const RoutingTrace& trace, const CacheSimOptions& options, std::vector<uint64_t>* log) {
  SimStore store(trace.header, options, log);
  const size_t layers = trace.header.moe_layers.size();
  std::vector<const std::vector<uint16_t>*> rows(layers);
  // Speculation regrouping: consecutive decode passes gathered into one verify pass.
  std::vector<std::vector<uint16_t>> gathered(layers);
  int64_t gathered_n = 0, gathered_start = 0;
  const auto flush = [&] {
    if (gathered_n == 0) return;
    for (size_t l = 0; l < layers; ++l) rows[l] = &gathered[l];
    store.pass(PassKind::Verify, gathered_start, gathered_n, rows);
    for (auto& g : gathered) g.clear();
    gathered_n = 0;
  };
  for (const RoutingPass& p : trace.passes) {
    if (options.verify_width > 0 && p.kind == PassKind::Decode && p.rewinds.empty()) {
      if (gathered_n == 0) gathered_start = p.start;
      for (size_t l = 0; l < layers; ++l) gathered[l].insert(gathered[l].end(), p.layers[l].begin(), p.layers[l].end());
      if (++gathered_n == options.verify_width) flush();
      continue;
    }
    flush();
    for (size_t l = 0; l < layers; ++l) rows[l] = &p.layers[l];
    store.pass(p.kind, p.start, p.n, rows);
    for (int64_t r : p.rewinds) store.rewind(r);
  }
  flush();
  return store.result();
}

}  // namespace

CacheSimResult simulate_cache(const RoutingTrace& trace, const CacheSimOptions& options) {
  return replay(trace, options, nullptr);
}

CacheSimResult simulate_oracle(const RoutingTrace& trace, CacheSimOptions options) {
  // The requests come in the same order under every policy (the trace fixes them): log them once,
  // then give each request tick the tick of the next request for the same expert.
  std::vector<uint64_t> keys;
  replay(trace, options, &keys);
  std::vector<uint64_t>& next = options.policy.next_request;
  next.assign(keys.size() + 1, ~uint64_t{0});
  std::unordered_map<uint64_t, uint64_t> later;  // key -> the tick of its next request
  for (size_t t = keys.size(); t >= 1; --t) {
    auto it = later.find(keys[t - 1]);
    next[t] = it == later.end() ? ~uint64_t{0} : it->second;
    later[keys[t - 1]] = t;
  }
  return replay(trace, options, nullptr);
}

}  // namespace deltafin
