// The engine template over one model family's traits (model/family.hpp): ModelEngine loads the
// config, the weight index, the expert reader and store, the backend and the model; ModelSession
// is one token timeline over it. The traits F say what differs between families:
//   Config, Model, State                  the config parser's type, the model, a timeline's state
//   kRecurrent                            whether State has a recurrent part (snapshots for rewinds)
//   load(path), experts(index, config)    config.json, the routed-expert table
//   new_state(model), state_bytes(state)  a fresh timeline state and its bytes
//   save_state, load_state                the state at a position as bytes and back (Session::save_state)
//   name, vocab, eos, context, bytes,
//   top_k                                 what the summary and the memory plan need of the config
// The model provides forward(state, tokens, n, start, logits, all_logits), spine_bytes(),
// stats(), set_lookahead(bytes) and, when kRecurrent, save_recurrent/restore_recurrent.
//
// Timeline state:
//   K2: the state is an append-only latent KV cache, so rewinding only moves the position.
//   K3: KDA layers carry a recurrent state, so a session keeps snapshots of it (not of the
//       append-only latent cache) taken before recent multi-token appends (prefill chunks, verify
//       passes; not single-token decode steps, whose copies would cost more than the step);
//       rewinding restores the latest snapshot at or before the target; the tokens from there to
//       the target (up to kLazyReplay of them; more are replayed at once) are replayed by the
//       next append, in the same pass as its own tokens (kernels are batch-invariant and chunking
//       does not change a result, so the state is bit-identical to never having gone further,
//       and a rejected guess costs no pass of its own: with a streamed spine a replay pass would
//       read the spine again).
#pragma once

#include <deltafin/engine.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "decode/host_engine.hpp"
#include "decode/memory_plan.hpp"
#include "decode/state_fingerprint.hpp"
#include "io/expert_reader.hpp"
#include "io/expert_store.hpp"
#include "model/drafter_memory.hpp"
#include "model/dspark_model.hpp"
#include "model/eagle3_model.hpp"
#include "model/routed_experts.hpp"
#include "weights/routing_trace.hpp"
#include "io/spine_stream.hpp"
#include "hosts/host_group.hpp"
#include "util/error.hpp"
#include "weights/expert_table.hpp"
#include "weights/model_size.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// What the memory plan of one engine is computed from.
struct MemoryInputs {
  ModelBytes bytes;          // from config.json
  uint64_t state = 0;        // KV cache and state for the planned positions
  uint64_t expert_slot = 0;  // one expert's buffer
  uint64_t all_experts = 0;  // every routed expert record at once
  int64_t top_k = 0;
  int64_t pass_wanted = 1;   // positions a prefill pass would cover at most (the plan sizes it)
};

// Every expert in a slot of the pool at once (slots: the largest record, 4 KiB-aligned).
uint64_t all_experts_bytes(const ExpertReader& reader, const ExpertTable& experts);
// One slot of the pool: the largest record, 4 KiB-aligned (0 without routed experts).
uint64_t expert_slot_bytes(const ExpertReader& reader, const ExpertTable& experts);
// The memory plan for `o` over the backend's pools (engine.cpp says where the budgets come
// from); `source` names the host's, `device_source` the device's (two pools only).
BudgetPlan plan_memory(const EngineOptions& o, const MemoryInputs& m, const std::vector<MemoryPool>& pools,
                       std::string& source, std::string& device_source);
// What the spine stream follows of a plan (io/spine_stream.hpp).
inline StreamPlan stream_plan(const BudgetPlan& p, const ModelBytes& bytes) {
  StreamPlan s{p.resident, p.host_held, {}, p.window_units};
  for (const SpineUnit& u : spine_units(bytes)) s.unit_bytes.push_back(u.bytes);
  return s;
}
// Warns about checkpoint tensors the config does not describe (layers past `layers` + `nextn`).
void warn_unused_tensors(const WeightIndex& index, int64_t layers, int64_t nextn);
// The expert reader of the placement (given, or next to the model) or of the shards; `source` says which.
std::unique_ptr<ExpertReader> open_reader(const EngineOptions& o, const WeightIndex& index, const ExpertTable& experts,
                                          std::string& source);
// The backend the options name (auto: CUDA when a device is present).
std::unique_ptr<Backend> open_backend(const EngineOptions& o);
// The host's budget: --memory-gb (`flag`; at most what the machine can give), else the
// machine's default; nullopt where neither is known (no /proc).
std::optional<DefaultBudget> host_budget(double memory_gb, const char* flag);
// A device's budget (a pool the host cannot write): --device-memory-gb (at most its free
// memory), else its default (its share of the free memory less a margin).
DefaultBudget device_budget(double device_memory_gb, const MemoryPool& device);

struct Family;
// A routing trace's header for this model (its shapes and one expert's read and memory bytes).
RoutingTraceHeader routing_trace_header(const std::string& model, int64_t top_k, const ExpertReader& reader,
                                        const ExpertTable& experts);
// The engine of `family` (decode/family_engines.cpp).
std::unique_ptr<Engine> open_family_engine(const Family& family, const EngineOptions& options);

template <class F>
class ModelSession final : public Session {
 public:
  static constexpr size_t kSnapshots = kRecurrentSnapshots;  // recurrent state kept from before the last appends
  // Positions a rewind leaves for the next append to replay (more run at once). Measured on the
  // K3-shaped bench model with a streamed spine (k3-public-bench/results/memory-budget-40-tokens.md).
  static constexpr int64_t kLazyReplay = 3;

  // pass: the plan's positions per pass; pass_all_logits: those whose activations and every
  // row's logits fit what the plan counts for a pass.
  ModelSession(typename F::Model& model, ExpertStore& store, const SpineStream* stream, int64_t pass, int64_t pass_all_logits)
      : model_(model), store_(store), stream_(stream), state_(F::new_state(model)), chunk_(pass), chunk_all_logits_(pass_all_logits) {}

  std::vector<float> append(std::span<const int32_t> tokens, bool all_logits, PassKind kind) override {
    const int64_t vocab = F::vocab(model_.config());
    if (RoutingRecorder* recorder = model_.routing_recorder()) recorder->set_kind(kind);
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) fail("nothing to append: the token list is empty");
    // K3 after a rewind: the positions the restored snapshot lacks are fed first, in this pass.
    const int64_t replay = replay_from_ >= 0 ? position_ - replay_from_ : 0, start = position_ - replay;
    std::vector<int32_t> fed(history_.begin() + start, history_.end());
    fed.insert(fed.end(), tokens.begin(), tokens.end());
    const int64_t total = replay + n;
    if constexpr (F::kRecurrent) {
      if (total > 1 && (snapshots_.empty() || snapshots_.back().first != start))
        snapshots_.push_back({start, model_.save_recurrent(state_)});
      if (snapshots_.size() > kSnapshots) snapshots_.pop_front();
    }
    // Rows of every fed position when all_logits (the replayed ones then dropped), else the last.
    std::vector<float> logits(all_logits ? total * vocab : vocab);
    for (int64_t done = 0; done < total;) {
      const int64_t m = std::min(all_logits ? chunk_all_logits_ : chunk_, total - done);
      const bool last = done + m == total;
      std::vector<float> ignored(all_logits || last ? 0 : vocab);
      float* dst = all_logits ? logits.data() + done * vocab : last ? logits.data() : ignored.data();
      const uint64_t selections = model_.stats().expert_selections;
      model_.forward(state_, fed.data() + done, m, start + done, dst, all_logits);
      last_pass_ = {m, model_.stats().expert_selections - selections};
      done += m;
    }
    if (all_logits) logits.erase(logits.begin(), logits.begin() + replay * vocab);
    replay_from_ = -1;
    position_ += n;
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    // Weights are checked as they load, so this catches what the inputs or the arithmetic made
    // (an overflow): refuse rather than sample token 0 from NaN.
    for (size_t i = 0; i < logits.size(); ++i)
      if (!std::isfinite(logits[i]))
        fail("the pass over positions {}..{} gave a non-finite logit (token {}): an activation overflowed or a weight is damaged",
             position_ - n, position_ - 1, static_cast<int64_t>(i % static_cast<size_t>(vocab)));
    return logits;
  }

  int64_t position() const override { return position_; }

  StorageReads storage_reads() const override { return {stream_ ? stream_->bytes_read() : 0, store_.stats().bytes_read}; }

  PassExperts last_pass_experts() const override {
    const ExpertStore::PassRequests r = store_.pass_requests();
    PassExperts out{last_pass_.first, last_pass_.second, r.pairs, r.bytes, r.missed};
    std::sort(out.pairs.begin(), out.pairs.end());
    out.pairs.erase(std::unique(out.pairs.begin(), out.pairs.end()), out.pairs.end());
    return out;
  }

  uint64_t state_bytes() const override {
    uint64_t bytes = F::state_bytes(state_);
    for (const auto& [pos, snapshot] : snapshots_) bytes += snapshot->bytes();
    return bytes;
  }

  void rewind(int64_t pos) override {
    if (pos < 0 || pos > position_) fail("cannot rewind to position {} (session is at {})", pos, position_);
    if (pos < position_) {
      store_.demote_from(pos);  // experts only the dropped positions used
      if (RoutingRecorder* recorder = model_.routing_recorder()) recorder->rewind(pos);
    }
    if constexpr (F::kRecurrent) {
      if (pos == position_) return;
      const int64_t at = replay_from_ >= 0 ? replay_from_ : position_;  // where the recurrent state is
      if (pos < at) {
        while (!snapshots_.empty() && snapshots_.back().first > pos) snapshots_.pop_back();
        if (snapshots_.empty()) {
          model_.restore_recurrent(state_, nullptr);
        } else {
          model_.restore_recurrent(state_, snapshots_.back().second.get());
        }
        replay_from_ = snapshots_.empty() ? 0 : snapshots_.back().first;
      } else {
        replay_from_ = at;
      }
      // A pass that replays takes no snapshot of its own (its start is the restored one), so a
      // replay left to the next append grows with every rejection in a row: past kLazyReplay
      // positions it runs now, in passes of its own, and the next append snapshots afresh.
      if (pos - replay_from_ > kLazyReplay) {
        std::vector<float> ignored(F::vocab(model_.config()));
        for (int64_t done = replay_from_; done < pos;) {
          const int64_t m = std::min(chunk_, pos - done);
          model_.forward(state_, history_.data() + done, m, done, ignored.data(), false);
          done += m;
        }
        replay_from_ = pos;
      }
      if (replay_from_ == pos) replay_from_ = -1;
    }
    position_ = pos;
    history_.resize(pos);
  }

  std::vector<std::byte> save_state() override {
    if constexpr (F::kRecurrent) {
      // After a rewind the recurrent state may lag position(): the pending replay runs first.
      std::vector<float> ignored(F::vocab(model_.config()));
      for (int64_t done = std::max<int64_t>(replay_from_, 0); replay_from_ >= 0 && done < position_;) {
        const int64_t m = std::min(chunk_, position_ - done);
        model_.forward(state_, history_.data() + done, m, done, ignored.data(), false);
        done += m;
      }
      replay_from_ = -1;
    }
    return F::save_state(model_, state_, position_);
  }

  BlockDraft draft_block(int32_t pending, int k, const ChooseGuess& choose) override {
    if constexpr (F::kBlockDrafter) {
      return model_.draft_block(state_, pending, position_, k, choose);
    } else {
      (void)pending, (void)k, (void)choose;
      return {};
    }
  }

  void load_state(std::span<const int32_t> tokens, std::span<const std::byte> state) override {
    const int64_t n = static_cast<int64_t>(tokens.size());
    F::load_state(model_, state_, n, state);  // checks the header before it changes anything
    position_ = n;
    history_.assign(tokens.begin(), tokens.end());
    if constexpr (F::kRecurrent) replay_from_ = -1, snapshots_.clear();
  }

 private:
  typename F::Model& model_;
  ExpertStore& store_;
  const SpineStream* stream_;  // nullptr: the spine is resident
  typename F::State state_;
  int64_t chunk_, chunk_all_logits_;
  int64_t position_ = 0;
  std::vector<int32_t> history_;
  std::pair<int64_t, uint64_t> last_pass_{0, 0};  // the last forward pass of append: positions, expert selections
  // K3 after a rewind: the recurrent state is at this position (< position_) and the next append
  // feeds history_ from here on before its tokens (-1: the state is at position_).
  int64_t replay_from_ = -1;
  // K3: (position, the recurrent state there); the latent cache is append-only and never copied.
  std::deque<std::pair<int64_t, std::unique_ptr<Buffer>>> snapshots_;
};

template <class F>
class ModelEngine final : public Engine {
 public:
  explicit ModelEngine(const EngineOptions& o)
      : options_(o),
        config_(F::load((std::filesystem::path(o.model_dir) / "config.json").string())),
        drafter_memory_(F::drafter_memory(o, config_)),
        index_(WeightIndex::open(o.model_dir)),
        experts_(F::experts(*index_, config_)),
        backend_(open_backend(o)),
        reader_(open_reader(o, *index_, experts_, expert_source_)),
        plan_(plan_memory(with_reserved(o, drafter_memory_.weights),
                          {bytes(), planned_state_bytes(planned_positions(o, config_)),
                           expert_slot_bytes(*reader_, experts_), all_experts_bytes(*reader_, experts_), F::top_k(config_),
                           pass_positions_wanted(o, config_)},
                          backend_->memory_pools(), memory_source_, device_memory_source_)),
        store_(*backend_, *index_, experts_, *reader_, plan_.experts),
        stream_(plan_.spine_streamed
                    ? std::make_unique<SpineStream>(*backend_, *index_, *reader_, stream_plan(plan_, bytes()))
                    : nullptr),
        model_(*index_, config_, *backend_, store_, stream_.get()) {
    summary_.architecture = F::name(config_);
    summary_.backend = backend_->describe();
    summary_.vocab_size = F::vocab(config_);
    summary_.eos_token_id = F::eos(config_);
    summary_.context_length = F::context(config_);
    summary_.spine_bytes = model_.spine_bytes() - (stream_ ? stream_->streamed_bytes() : 0);  // resident
    summary_.state_bytes_per_position = planned_state_bytes(1) - planned_state_bytes(0);
    summary_.append_only_state = !F::kRecurrent;
    summary_.planned_state_bytes = planned_state_bytes(planned_positions(o, config_));
    summary_.routed_expert_bytes = store_.total_expert_bytes();
    for (int64_t l = 0; l < experts_.layers(); ++l) summary_.moe_layers += experts_.has(l) ? 1 : 0;
    summarize_plan();
    if (hosts::HostGroup* group = o.across_hosts ? hosts::host_group() : nullptr) {
      hosts_ = open_host_experts(*group, o, *backend_, store_, experts_, expert_source_);
      model_.set_producer(*hosts_);
      if (o.lookahead) spdlog::warn("--lookahead: not used on several hosts yet (it would read other hosts' experts here)");
    } else if (o.lookahead) {
      model_.set_lookahead(store_.budget_bytes() / 4);
    }
    if (o.record_routing) {
      RoutingTraceHeader header = routing_trace_header(F::name(config_), F::top_k(config_), *reader_, experts_);
      header.label = "deltafin run --model " + o.model_dir;
      recorder_ = std::make_unique<RoutingRecorder>(std::move(header));
      model_.set_routing_recorder(recorder_.get());
    }
    warn_unused_tensors(*index_, config_.num_hidden_layers, config_.num_nextn_predict_layers);
    if (!o.dspark_dir.empty() || !o.eagle3_dir.empty()) attach_drafter(o);
  }

  ~ModelEngine() override {
    if (stream_) stream_->drain();  // spine reads in flight land in the model's buffers
  }

  const ModelSummary& summary() const override { return summary_; }

  // The positions planned, at most the model's context (past it the caller asks explicitly, and
  // the cache grows as it goes).
  static int64_t planned_positions(const EngineOptions& o, const typename F::Config& c) {
    return F::context(c) > 0 ? std::min(o.positions, F::context(c)) : o.positions;
  }
  // What a prefill pass would cover: the planned positions (none planned: the context, at most
  // kMaxPassPositions), at most --chunk.
  static int64_t pass_positions_wanted(const EngineOptions& o, const typename F::Config& c) {
    const int64_t planned = planned_positions(o, c);
    const int64_t whole = planned > 0 ? planned : F::context(c) > 0 ? F::context(c) : kMaxPassPositions;
    return o.chunk > 0 ? std::min(o.chunk, whole) : whole;
  }
  // The latent cache for `positions`, and the recurrent state once for the live state and (K3)
  // once per snapshot kept for rewinds.
  uint64_t planned_state_bytes(int64_t positions) const { return deltafin::planned_state_bytes(bytes(), positions); }
  // The model's bytes, a built-in drafter's per-position state and pass rows included.
  ModelBytes bytes() const { return with_drafter(F::bytes(config_), drafter_memory_); }
  static EngineOptions with_reserved(EngineOptions o, uint64_t bytes) {
    o.reserved_bytes += bytes;
    return o;
  }

  std::unique_ptr<Session> new_session() override {
    const int64_t all_logits = bytes().activations.positions_within(plan_.pass_activations, plan_.pass_positions, true);
    return std::make_unique<ModelSession<F>>(model_, store_, stream_.get(), plan_.pass_positions, all_logits);
  }

  EngineStats stats() const override {
    const ExpertStoreStats s = store_.stats();
    const PassStats& p = model_.stats();
    EngineStats out;
    out.expert_bytes_read = s.bytes_read, out.expert_hits = s.hits, out.expert_misses = s.misses;
    out.spine_bytes_read = stream_ ? stream_->bytes_read() : 0;
    out.spine_record_bytes_read = stream_ ? stream_->record_bytes_read() : 0;
    out.peak_cache_bytes = s.peak_cached_bytes, out.cache_budget_bytes = store_.budget_bytes();
    out.passes = p.passes, out.positions = p.positions;
    out.expert_runs = p.expert_runs, out.expert_selections = p.expert_selections;
    out.repeat_reads_in_pass = s.repeat_reads_in_pass;
    out.union_expert_bytes = s.union_bytes;
    out.activation_peak_bytes = p.scratch_peak;
    out.prefetch_reads = s.prefetch_reads;
    out.prefetch_used = s.prefetch_used;
    out.prefetch_bytes = s.prefetch_bytes;
    out.prefetch_cancelled = s.prefetch_cancelled;
    out.io_wait_seconds = s.wait_seconds;
    out.spine_wait_seconds = p.spine_wait_seconds;
    out.spine_drive_busy_seconds = reader_->shard_drive_stats().busy_seconds;
    const DeviceTimes t = backend_->times();
    out.device_spine_seconds = t.spine_seconds, out.device_expert_seconds = t.expert_seconds;
    out.device_upload_seconds = t.upload_seconds, out.device_upload_bytes = t.upload_bytes;
    out.expert_source = expert_source_;
    for (const DriveStats& d : reader_->drive_stats())
      out.drives.push_back({d.name, d.bytes, d.reads, d.errors, d.busy_seconds, d.failed, d.bad_copies});
    if (hosts_) out.hosts = host_reports(*hosts_, out);
    return out;
  }

  // DSpark (--draft dspark) or an EAGLE-3 head (--draft eagle3), which share the target's embedding
  // (and lm_head): off, with a warning, when the plan streams them (a drafter pass would read them
  // again out of turn).
  void attach_drafter(const EngineOptions& o) {
    if constexpr (F::kBlockDrafter) {
      const bool eagle3 = !o.eagle3_dir.empty();
      const size_t head = plan_.resident.size() - 1;
      if (!plan_.resident[0] || !plan_.resident[head]) {
        spdlog::warn("--draft {}: the memory plan streams the target's embedding or lm_head, which the drafter "
                     "shares; drafting is off (raise --memory-gb to keep them resident)", eagle3 ? "eagle3" : "dspark");
        return;
      }
      if (eagle3)
        drafter_ = std::make_unique<Eagle3Model>(o.eagle3_dir, load_eagle3_config(o.eagle3_dir, config_), *backend_,
                                                 model_.embedding(), model_.lm_head());
      else
        drafter_ = std::make_unique<DSparkModel>(o.dspark_dir, load_dspark_config(o.dspark_dir), *backend_,
                                                 model_.embedding(), model_.lm_head());
      model_.set_drafter(drafter_.get());
      summary_.drafter_bytes = drafter_->bytes();
    }
  }

  // The plan's figures in the summary (what the receipt prints).
  void summarize_plan() {
    const ModelBytes b = bytes();
    summary_.memory_budget = plan_.two_pools ? plan_.host_budget : plan_.budget;
    summary_.memory_source = memory_source_;
    if (plan_.two_pools) {
      summary_.device_memory_budget = plan_.budget, summary_.device_memory_source = device_memory_source_;
      summary_.spine_host_bytes = plan_.spine_host, summary_.host_minimum_bytes = plan_.host_minimum;
    }
    summary_.spine_resident_bytes = plan_.spine_resident, summary_.spine_streamed_bytes = plan_.spine_streamed;
    summary_.spine_window_bytes = plan_.window;
    summary_.spine_units = plan_.resident.size();
    summary_.spine_units_streamed = std::count(plan_.resident.begin(), plan_.resident.end(), false);
    summary_.expert_budget_bytes = store_.budget_bytes();
    summary_.working_bytes = working_reserve(b.spine);
    summary_.minimum_bytes = plan_.minimum;
    summary_.pass_positions = plan_.pass_positions;
    summary_.activation_bytes_per_position = b.activations.per_position();
    summary_.pass_activation_bytes = plan_.pass_activations;
    // What another engine of the process counts for this one: the runtime's share of working
    // memory (the floor) is counted once, by that engine.
    summary_.footprint_bytes = plan_.spine_resident + plan_.window + store_.budget_bytes() + summary_.planned_state_bytes +
                               plan_.pass_activations + std::min(summary_.working_bytes, b.spine / 4);
  }

  std::string usage_json() const override {
    return deltafin::usage_json(model_fingerprint(experts_), hosts_ ? hosts_->usage() : store_.usage());
  }

  std::string routing_trace() const override { return recorder_ ? recorder_->bytes() : std::string(); }

  std::string state_fingerprint() const override { return deltafin::state_fingerprint(*index_, experts_, *backend_); }

 private:
  EngineOptions options_;
  typename F::Config config_;
  DrafterMemory drafter_memory_;  // a built-in drafter's share of the plan (none: all 0)
  std::unique_ptr<WeightIndex> index_;
  ExpertTable experts_;
  std::unique_ptr<Backend> backend_;
  std::string expert_source_;
  std::unique_ptr<ExpertReader> reader_;
  std::string memory_source_, device_memory_source_;
  BudgetPlan plan_;
  ExpertStore store_;
  std::unique_ptr<SpineStream> stream_;  // the streamed spine units (nullptr: all resident)
  typename F::Model model_;
  std::unique_ptr<hosts::HostExperts> hosts_;  // a run on several hosts: who runs the routed experts
  std::unique_ptr<RoutingRecorder> recorder_;  // --record-routing
  std::unique_ptr<HiddenDrafter> drafter_;     // --draft dspark|eagle3 (model_ holds a pointer: declared after it)
  ModelSummary summary_;
};

}  // namespace deltafin
