// Engine and Session over the model families (K2/DeepSeek-V3 and K3), the CPU backend and the
// expert store (fed by the placement's drives or the original shards). One template serves both families; they differ in their config,
// expert table, model and timeline state:
//   K2: the state is an append-only latent KV cache, so rewinding only moves the position.
//   K3: KDA layers carry a recurrent state, so a session keeps snapshots of it (not of the
//       append-only latent cache) taken before recent multi-token appends (prefill chunks, verify
//       passes; not single-token decode steps, whose copies would cost more than the step);
//       rewinding restores the latest snapshot at or before the target and replays the tokens up
//       to it (kernels are deterministic, so the state is bit-identical to never having gone
//       further).
#include <deltafin/engine.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>

#include "backend/backend.hpp"
#include "io/expert_reader.hpp"
#include "io/expert_store.hpp"
#include "model/k2_model.hpp"
#include "model/k3_model.hpp"
#include "io/aligned_buffer.hpp"
#include "util/error.hpp"
#include "util/human_bytes.hpp"
#include "util/memory_available.hpp"
#include "weights/model_size.hpp"
#include "weights/model_family.hpp"
#include "weights/placement.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {
namespace {

struct K2Family {
  using Config = ModelConfig;
  using Model = K2Model;
  using State = LatentKvCache;
  static constexpr bool kRecurrent = false;
  static Config load(const std::string& path) { return load_model_config(path); }
  static ExpertTable experts(const WeightIndex& index, const Config& c) { return k2_expert_table(index, c); }
  static State new_state(const Model& m) { return m.new_cache(); }
  static std::string name(const Config& c) { return fmt::format("{} (DeepSeek-V3 architecture)", c.model_type); }
  static int64_t vocab(const Config& c) { return c.vocab_size; }
  static int64_t eos(const Config& c) { return c.eos_token_id; }
  static int64_t context(const Config& c) { return c.max_position_embeddings; }
    static uint64_t state_bytes(const State& s) { return s.bytes(); }
  static ModelBytes bytes(const Config& c) { return k2_bytes_from_config(c); }
};

struct K3Family {
  using Config = K3Config;
  using Model = K3Model;
  using State = K3State;
  static constexpr bool kRecurrent = true;
  static Config load(const std::string& path) { return load_k3_config(path); }
  static ExpertTable experts(const WeightIndex& index, const Config& c) { return k3_expert_table(index, c); }
  static State new_state(const Model& m) { return m.new_state(); }
  static std::string name(const Config&) { return "kimi_k3 (KDA + gated MLA hybrid)"; }
  static int64_t vocab(const Config& c) { return c.vocab_size; }
  static int64_t eos(const Config& c) { return c.eos_token_id; }
  static int64_t context(const Config& c) { return c.max_position_embeddings; }
    static uint64_t state_bytes(const State& s) { return s.mla.bytes() + s.recurrent->bytes(); }
  static ModelBytes bytes(const Config& c) { return k3_bytes_from_config(c); }
};

// What one engine keeps in memory besides its expert cache.
struct MemoryPlan {
  uint64_t spine = 0;
  uint64_t state = 0;      // KV cache and state for `positions`
  int64_t positions = 0;
  uint64_t experts = 0;    // every routed expert record at once
};

// Every expert in a slot of the pool at once (slots: the largest record, 4 KiB-aligned).
uint64_t all_experts_bytes(const ExpertReader& reader, const ExpertTable& experts) {
  uint64_t largest = 0, records = 0;
  for (int64_t layer = 0; layer < experts.layers(); ++layer)
    if (experts.has(layer))
      for (int64_t e = 0; e < experts.experts(); ++e) largest = std::max(largest, reader.buffer_bytes(layer, e)), ++records;
  return records * round_up(largest, AlignedBuffer::kAlignment);
}

// The expert budget: at most what every expert takes at once (more is never used). The spine,
// the KV cache and state for the planned positions, a working reserve and what the caller holds
// back for others (a draft model's expert share) must fit in what the machine (and its cgroup)
// has free; a default budget is lowered to the rest, saying so; one the user gave is refused in
// one line when it does not fit.
uint64_t fitting_budget(const EngineOptions& o, const MemoryPlan& p) {
  const uint64_t asked = std::min(static_cast<uint64_t>(o.cache_gb * 1e9), p.experts);
  const auto avail = memory_available();
  if (!avail) return asked;
  // Activations and the runtime: a quarter of the spine, 32 MB to 256 MB.
  const uint64_t reserve = std::clamp<uint64_t>(p.spine / 4, 32'000'000, 256'000'000);
  const uint64_t fixed = p.spine + p.state + reserve + o.reserved_bytes;
  std::string what = fmt::format("{}: the model's spine ({})", o.model_dir, human_bytes(p.spine));
  if (p.state) what += fmt::format(", its KV cache and state for {} positions ({})", p.positions, human_bytes(p.state));
  if (o.reserved_bytes) what += fmt::format(", the draft model's experts and cache ({})", human_bytes(o.reserved_bytes));
  what += fmt::format(" and working memory ({})", human_bytes(reserve));
  if (fixed > avail->bytes) fail("{} do not fit in the {} free ({})", what, human_bytes(avail->bytes), avail->source);
  const uint64_t room = avail->bytes - fixed;
  if (asked <= room) return asked;
  if (o.cache_gb_given)
    fail("--cache-gb {}: {} leave {} of the {} free ({}) for experts; at most --cache-gb {:.4g}", o.cache_gb, what,
         human_bytes(room), human_bytes(avail->bytes), avail->source, room / 1e9);
  spdlog::warn("expert budget lowered from {} to {}: {} take the rest of the {} free ({})", human_bytes(asked),
               human_bytes(room), what, human_bytes(avail->bytes), avail->source);
  return room;
}

// Warns about checkpoint tensors the config does not describe (a config with 5 layers for a
// checkpoint of 6), as transformers does. Not counted: multi-token-prediction layers
// [layers, layers + nextn), and tensors outside the language model (a multimodal wrapper's
// vision tower when the language model sits under a prefix).
void warn_unused_tensors(const WeightIndex& index, int64_t layers, int64_t nextn) {
  std::vector<std::string> unused;
  for (const std::string& name : index.unused_tensors()) {
    if (name.rfind(index.prefix(), 0) != 0) continue;
    const std::string_view rest = std::string_view(name).substr(index.prefix().size());
    int64_t layer = -1;
    if (rest.rfind("model.layers.", 0) == 0) {
      const std::string digits(rest.substr(13, rest.find('.', 13) - 13));
      if (!digits.empty() && digits.size() < 10 && std::all_of(digits.begin(), digits.end(), ::isdigit)) layer = std::stoll(digits);
    }
    if (layer >= layers && layer < layers + nextn) continue;
    unused.push_back(name);
  }
  if (unused.empty()) return;
  spdlog::warn("{}: {} tensor(s) of the checkpoint are not used by its config.json (first: '{}'{}); does the config "
               "describe this checkpoint?",
               index.dir(), unused.size(), unused.front(), unused.size() > 1 ? fmt::format(", last: '{}'", unused.back()) : "");
}

// Expert records come from the placement when there is one (given, or next to the model), else
// from the original shards.
std::unique_ptr<ExpertReader> open_reader(const EngineOptions& o, const WeightIndex& index, const ExpertTable& experts,
                                          std::string& source) {
  ReaderOptions r;
  r.bypass = o.bypass;
  r.depth = o.io_depth;
  r.piece_bytes = round_up(static_cast<uint64_t>(o.io_piece_mb * (1 << 20)), 4096);
  r.verify = o.verify_reads;
  std::string path = o.placement;
  if (path.empty() && std::filesystem::exists(default_placement_path(o.model_dir))) path = default_placement_path(o.model_dir);
  if (path.empty() || path == "none") {
    source = "shards";
    return ExpertReader::from_shards(index, experts, r);
  }
  source = path;
  return ExpertReader::from_placement(read_placement(path), path, index, experts, r);
}

template <class F>
class ModelSession final : public Session {
 public:
  static constexpr size_t kSnapshots = 4;  // recurrent state kept from before the last appends

  ModelSession(typename F::Model& model, ExpertStore& store, int64_t chunk)
      : model_(model), store_(store), state_(F::new_state(model)), chunk_(chunk) {}

  std::vector<float> append(std::span<const int32_t> tokens, bool all_logits) override {
    const int64_t vocab = F::vocab(model_.config());
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) fail("nothing to append: the token list is empty");
    if constexpr (F::kRecurrent) {
      if (n > 1) snapshots_.push_back({position_, model_.save_recurrent(state_)});
      if (snapshots_.size() > kSnapshots) snapshots_.pop_front();
    }
    std::vector<float> logits(all_logits ? n * vocab : vocab);
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min(chunk_, n - done);
      const bool last = done + m == n;
      std::vector<float> ignored(all_logits || last ? 0 : vocab);
      float* dst = all_logits ? logits.data() + done * vocab : last ? logits.data() : ignored.data();
      model_.forward(state_, tokens.data() + done, m, position_, dst, all_logits);
      position_ += m;
      done += m;
    }
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

  uint64_t state_bytes() const override {
    uint64_t bytes = F::state_bytes(state_);
    for (const auto& [pos, snapshot] : snapshots_) bytes += snapshot->bytes();
    return bytes;
  }

  void rewind(int64_t pos) override {
    if (pos < 0 || pos > position_) fail("cannot rewind to position {} (session is at {})", pos, position_);
    if (pos < position_) store_.demote_from(pos);  // experts only the dropped positions used
    if constexpr (F::kRecurrent) {
      if (pos == position_) return;
      while (!snapshots_.empty() && snapshots_.back().first > pos) snapshots_.pop_back();
      int64_t from = 0;
      if (snapshots_.empty()) {
        model_.restore_recurrent(state_, nullptr);
      } else {
        from = snapshots_.back().first;
        model_.restore_recurrent(state_, snapshots_.back().second.get());
      }
      std::vector<float> ignored(F::vocab(model_.config()));
      for (int64_t done = from; done < pos;) {  // replay what the snapshot lacks, in the same passes
        const int64_t m = std::min(chunk_, pos - done);
        model_.forward(state_, history_.data() + done, m, done, ignored.data(), false);
        done += m;
      }
    }
    position_ = pos;
    history_.resize(pos);
  }

 private:
  typename F::Model& model_;
  ExpertStore& store_;
  typename F::State state_;
  int64_t chunk_;
  int64_t position_ = 0;
  std::vector<int32_t> history_;
  // K3: (position, the recurrent state there); the latent cache is append-only and never copied.
  std::deque<std::pair<int64_t, std::unique_ptr<Buffer>>> snapshots_;
};

template <class F>
class ModelEngine final : public Engine {
 public:
  explicit ModelEngine(const EngineOptions& o)
      : options_(o),
        config_(F::load((std::filesystem::path(o.model_dir) / "config.json").string())),
        index_(WeightIndex::open(o.model_dir)),
        experts_(F::experts(*index_, config_)),
        backend_(make_cpu_backend(o.threads)),
        reader_(open_reader(o, *index_, experts_, expert_source_)),
        store_(*backend_, *index_, experts_, *reader_,
               fitting_budget(o, {F::bytes(config_).spine, planned_state_bytes(config_, planned_positions(o, config_)),
                                  planned_positions(o, config_), all_experts_bytes(*reader_, experts_)})),
        model_(*index_, config_, *backend_, store_) {
    summary_.architecture = F::name(config_);
    summary_.vocab_size = F::vocab(config_);
    summary_.eos_token_id = F::eos(config_);
    summary_.context_length = F::context(config_);
    summary_.spine_bytes = model_.spine_bytes();
    summary_.state_bytes_per_position = planned_state_bytes(config_, 1) - planned_state_bytes(config_, 0);
    summary_.planned_state_bytes = planned_state_bytes(config_, planned_positions(o, config_));
    summary_.routed_expert_bytes = store_.total_expert_bytes();
    for (int64_t l = 0; l < experts_.layers(); ++l) summary_.moe_layers += experts_.has(l) ? 1 : 0;
    if (o.lookahead) model_.set_lookahead(store_.budget_bytes() / 4);
    warn_unused_tensors(*index_, config_.num_hidden_layers, config_.num_nextn_predict_layers);
  }

  const ModelSummary& summary() const override { return summary_; }

  // The positions planned, at most the model's context (past it the caller asks explicitly, and
  // the cache grows as it goes).
  static int64_t planned_positions(const EngineOptions& o, const typename F::Config& c) {
    return F::context(c) > 0 ? std::min(o.positions, F::context(c)) : o.positions;
  }
  // The latent cache for `positions`, and the recurrent state once for the live state and (K3)
  // once per snapshot kept for rewinds.
  static uint64_t planned_state_bytes(const typename F::Config& c, int64_t positions) {
    const ModelBytes b = F::bytes(c);
    return static_cast<uint64_t>(positions) * b.kv_per_position +
           b.recurrent_state * (1 + (F::kRecurrent ? ModelSession<F>::kSnapshots : 0));
  }

  std::unique_ptr<Session> new_session() override { return std::make_unique<ModelSession<F>>(model_, store_, options_.chunk); }

  EngineStats stats() const override {
    const ExpertStoreStats s = store_.stats();
    const PassStats& p = model_.stats();
    EngineStats out;
    out.expert_bytes_read = s.bytes_read, out.expert_hits = s.hits, out.expert_misses = s.misses;
    out.peak_cache_bytes = s.peak_cached_bytes, out.cache_budget_bytes = store_.budget_bytes();
    out.passes = p.passes, out.positions = p.positions;
    out.expert_runs = p.expert_runs, out.expert_selections = p.expert_selections;
    out.repeat_reads_in_pass = s.repeat_reads_in_pass;
    out.prefetch_reads = s.prefetch_reads;
    out.prefetch_used = s.prefetch_used;
    out.prefetch_bytes = s.prefetch_bytes;
    out.io_wait_seconds = s.wait_seconds;
    out.expert_source = expert_source_;
    for (const DriveStats& d : reader_->drive_stats())
      out.drives.push_back({d.name, d.bytes, d.reads, d.errors, d.busy_seconds, d.failed});
    return out;
  }

  std::string usage_json() const override { return deltafin::usage_json(model_fingerprint(experts_), store_.usage()); }

 private:
  EngineOptions options_;
  typename F::Config config_;
  std::unique_ptr<WeightIndex> index_;
  ExpertTable experts_;
  std::unique_ptr<Backend> backend_;
  std::string expert_source_;
  std::unique_ptr<ExpertReader> reader_;
  ExpertStore store_;
  typename F::Model model_;
  ModelSummary summary_;
};

}  // namespace

std::unique_ptr<Engine> Engine::open(const EngineOptions& options) {
  if (!(options.cache_gb >= 0 && options.cache_gb <= 1e9))  // also NaN and inf
    fail("--cache-gb must be a number of GB >= 0 (got {})", options.cache_gb);
  if (options.threads < 0) fail("--threads must be >= 0 (0: one per hardware thread; got {})", options.threads);
  if (options.chunk <= 0) fail("--chunk must be positive (got {})", options.chunk);
  if (options.positions < 0) fail("the planned positions must be >= 0 (got {})", options.positions);
  if (options.io_depth < 1 || options.io_depth > 256) fail("--io-depth must be 1..256 (got {})", options.io_depth);
  if (!(options.io_piece_mb >= 0.004 && options.io_piece_mb <= 1024))
    fail("--io-piece-mb must be between 0.004 and 1024 (got {})", options.io_piece_mb);
  const std::string config = (std::filesystem::path(options.model_dir) / "config.json").string();
  switch (detect_model_family(config)) {
    case ModelFamily::KimiK2: return std::make_unique<ModelEngine<K2Family>>(options);
    case ModelFamily::KimiK3: return std::make_unique<ModelEngine<K3Family>>(options);
  }
  fail("{}: unknown model family", config);
}

}  // namespace deltafin
