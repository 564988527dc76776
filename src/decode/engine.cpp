// The engine's family-independent parts (decode/model_engine.hpp): the memory plan and the
// expert budget, the expert reader's source, the backend, and Engine::open, which checks the
// options and opens the engine of the config's family.
#include <deltafin/engine.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "decode/model_engine.hpp"
#include "io/aligned_buffer.hpp"
#include "model/family.hpp"
#include "util/error.hpp"
#include "util/human_bytes.hpp"
#include "util/memory_available.hpp"
#include "weights/placement.hpp"

namespace deltafin {

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

std::unique_ptr<Backend> open_backend(const EngineOptions& o) {
  if (o.backend == "cuda" || (o.backend == "auto" && cuda_device_present())) return make_cuda_backend();
  if (o.backend == "metal" || (o.backend == "auto" && metal_device_present())) return make_metal_backend();
  return make_cpu_backend(o.threads);
}



std::unique_ptr<Engine> Engine::open(const EngineOptions& options) {
  if (!(options.cache_gb >= 0 && options.cache_gb <= 1e9))  // also NaN and inf
    fail("--cache-gb must be a number of GB >= 0 (got {})", options.cache_gb);
  if (options.threads < 0) fail("--threads must be >= 0 (0: one per hardware thread; got {})", options.threads);
  if (options.backend != "cpu" && options.backend != "cuda" && options.backend != "metal" && options.backend != "auto")
    fail("--backend must be cpu, cuda, metal or auto (got '{}')", options.backend);
  if (options.chunk <= 0) fail("--chunk must be positive (got {})", options.chunk);
  if (options.positions < 0) fail("the planned positions must be >= 0 (got {})", options.positions);
  if (options.io_depth < 1 || options.io_depth > 256) fail("--io-depth must be 1..256 (got {})", options.io_depth);
  if (!(options.io_piece_mb >= 0.004 && options.io_piece_mb <= 1024))
    fail("--io-piece-mb must be between 0.004 and 1024 (got {})", options.io_piece_mb);
  const std::string config = (std::filesystem::path(options.model_dir) / "config.json").string();
  return family_of(config).open_engine(options);
}

}  // namespace deltafin
