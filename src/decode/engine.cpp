// Engine and Session over the K2-family model, the CPU backend and the synchronous expert store.
#include <deltafin/engine.hpp>

#include "backend/backend.hpp"
#include "io/expert_store.hpp"
#include "model/k2_model.hpp"
#include "util/error.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {
namespace {

class K2Engine;

class K2Session final : public Session {
 public:
  K2Session(K2Model& model, int64_t chunk) : model_(model), cache_(model.new_cache()), chunk_(chunk) {}

  std::vector<float> append(std::span<const int32_t> tokens, bool all_logits) override {
    const int64_t vocab = model_.config().vocab_size;
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) fail("nothing to append: the token list is empty");
    std::vector<float> logits(all_logits ? n * vocab : vocab);
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min(chunk_, n - done);
      const bool last = done + m == n;
      float* dst = all_logits ? logits.data() + done * vocab : logits.data();
      if (all_logits || last) model_.forward(cache_, tokens.data() + done, m, position_, dst, all_logits);
      else {
        std::vector<float> ignored(vocab);
        model_.forward(cache_, tokens.data() + done, m, position_, ignored.data(), false);
      }
      position_ += m;
      done += m;
    }
    return logits;
  }

  int64_t position() const override { return position_; }

  void rewind(int64_t pos) override {
    if (pos < 0 || pos > position_) fail("cannot rewind to position {} (session is at {})", pos, position_);
    position_ = pos;
  }

 private:
  K2Model& model_;
  LatentKvCache cache_;
  int64_t chunk_;
  int64_t position_ = 0;
};

class K2Engine final : public Engine {
 public:
  explicit K2Engine(const EngineOptions& o)
      : options_(o),
        index_(WeightIndex::open(o.model_dir)),
        backend_(make_cpu_backend(o.threads)),
        store_(*index_, static_cast<uint64_t>(o.cache_gb * 1e9)),
        model_(*index_, *backend_, store_) {
    if (o.chunk <= 0) fail("--chunk must be positive (got {})", o.chunk);
    const ModelConfig& c = index_->config();
    summary_.architecture = fmt::format("{} (DeepSeek-V3 architecture)", c.model_type);
    summary_.vocab_size = c.vocab_size;
    summary_.eos_token_id = c.eos_token_id;
    summary_.spine_bytes = model_.spine_bytes();
  }

  const ModelSummary& summary() const override { return summary_; }

  std::unique_ptr<Session> new_session() override { return std::make_unique<K2Session>(model_, options_.chunk); }

  EngineStats stats() const override {
    const ExpertStoreStats s = store_.stats();
    const PassStats& p = model_.stats();
    return EngineStats{s.bytes_read, s.hits, s.misses, s.peak_cached_bytes, store_.budget_bytes(),
                       p.passes, p.positions, p.expert_runs, p.expert_selections};
  }

 private:
  EngineOptions options_;
  std::unique_ptr<WeightIndex> index_;
  std::unique_ptr<Backend> backend_;
  ExpertStore store_;
  K2Model model_;
  ModelSummary summary_;
};

}  // namespace

std::unique_ptr<Engine> Engine::open(const EngineOptions& options) {
  if (options.cache_gb < 0) fail("--cache-gb must be >= 0 (got {})", options.cache_gb);
  return std::make_unique<K2Engine>(options);
}

}  // namespace deltafin
