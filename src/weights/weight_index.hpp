// The index of every tensor of a checkpoint directory: config.json, the shards (one
// model.safetensors, or model.safetensors.index.json + its weight_map), their validated headers,
// and the routed experts grouped by (layer, expert, projection). Reads no tensor data except on
// request. Tensor names are looked up without the root prefix ("model.layers.3...."), which is
// detected once ("" for K2/DeepSeek-V3, "language_model." for K2.5-style multimodal wrappers).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cpu/weight_view.hpp"
#include "io/read_only_file.hpp"
#include "weights/model_config.hpp"
#include "weights/safetensors.hpp"

namespace deltafin {

struct TensorRef {
  const TensorInfo* info = nullptr;
  int shard = -1;
};

// A weight matrix [rows, cols] in its stored format, with its block scales when quantized.
struct MatrixRef {
  std::string name;
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  TensorRef weight;
  TensorRef scale;  // F8_E4M3_BLOCK128: weight_scale_inv [ceil(rows/128), ceil(cols/128)] F32

  uint64_t bytes() const { return weight.info->nbytes + (scale.info ? scale.info->nbytes : 0); }
};

enum ExpertProj : int { kGateProj = 0, kUpProj = 1, kDownProj = 2 };

struct ExpertRef {
  std::array<MatrixRef, 3> proj;  // gate [inter, hidden], up [inter, hidden], down [hidden, inter]
  uint64_t bytes() const { return proj[0].bytes() + proj[1].bytes() + proj[2].bytes(); }
};

class WeightIndex {
 public:
  // Opens a model directory; throws deltafin::Error naming the file and tensor on bad input.
  static std::unique_ptr<WeightIndex> open(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  const std::string& prefix() const { return prefix_; }

  // nullptr when absent. `name` is without the root prefix.
  const TensorRef* find(const std::string& name) const;
  // A matrix of the given shape in a supported format; throws when absent or inconsistent.
  MatrixRef matrix(const std::string& name, int64_t rows, int64_t cols) const;
  // A float vector of n elements (norm weights, correction bias); throws when inconsistent.
  TensorRef vector(const std::string& name, int64_t n) const;

  const ExpertRef& expert(int64_t layer, int64_t expert) const;
  bool has_experts(int64_t layer) const;

  // Reads a tensor's bytes into dst (nbytes of it).
  void read(const TensorRef& t, void* dst) const;
  const std::string& shard_path(int shard) const { return shards_[shard].file->path(); }
  const ReadOnlyFile& shard_file(int shard) const { return *shards_[shard].file; }

  // Every tensor, for inspect.
  std::vector<TensorRef> all_tensors() const;

 private:
  struct Shard {
    std::unique_ptr<ReadOnlyFile> file;
    SafetensorsHeader header;
    std::unordered_map<std::string_view, const TensorInfo*> by_name;  // into header.tensors
  };

  WeightIndex() = default;
  int add_shard(const std::string& filename);
  void index_sharded(const std::string& index_path);
  void detect_prefix();
  void index_experts();
  std::string where(const std::string& name) const;  // "file: tensor 'full.name'"

  std::string dir_;
  std::string prefix_;
  ModelConfig config_;
  std::vector<Shard> shards_;
  std::unordered_map<std::string, TensorRef> tensors_;          // full names
  std::vector<std::vector<ExpertRef>> experts_;                  // [layer][expert]; empty for dense
};

}  // namespace deltafin
