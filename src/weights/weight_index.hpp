// The index of every tensor of a checkpoint directory: the shards (one model.safetensors, or
// model.safetensors.index.json + its weight_map) and their validated headers. Reads no tensor
// data except on request. Matrices are checked against the shapes the model's config implies,
// in any stored format (plain, block-fp8, MXFP4, INT4 group-32). Tensor names are looked up without the root prefix ("model.layers.3...."), which is
// detected once ("" for K2/DeepSeek-V3, "language_model." for K2.5-style multimodal wrappers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cpu/weight_view.hpp"
#include "util/read_only_file.hpp"
#include "weights/safetensors.hpp"

namespace deltafin {

struct TensorRef {
  const TensorInfo* info = nullptr;
  int shard = -1;
};

// A weight matrix [rows, cols] in its stored format, with its scales when quantized:
//   `X.weight` F32/F16/BF16; `X.weight` F8_E4M3 + `X.weight_scale_inv` (block fp8);
//   `X.weight_packed` U8 + `X.weight_scale` U8 (MXFP4); `X.weight_packed` I32 + `X.weight_scale`
//   BF16 (+ optional `X.weight_shape`) (INT4 group-32, compressed-tensors pack-quantized).
struct MatrixRef {
  std::string name;
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  TensorRef weight;
  TensorRef scale;

  uint64_t bytes() const { return weight.info->nbytes + (scale.info ? scale.info->nbytes : 0); }
};

class WeightIndex {
 public:
  // Opens a model directory's shards; throws deltafin::Error naming the file and tensor on bad input.
  // The names' root prefix is what stands before `anchor`, a tensor every such checkpoint has.
  static std::unique_ptr<WeightIndex> open(const std::string& dir, const std::string& anchor = "model.embed_tokens.weight");

  const std::string& dir() const { return dir_; }
  const std::string& prefix() const { return prefix_; }

  // nullptr when absent. `name` is without the root prefix.
  const TensorRef* find(const std::string& name) const;
  // The matrix `base` ("model.layers.3.mlp.experts.7.w1", without ".weight") of the given shape
  // in any supported format; throws when absent or inconsistent.
  MatrixRef matrix(const std::string& base, int64_t rows, int64_t cols) const;
  // A float vector of n elements (norm weights, correction bias); throws when inconsistent.
  TensorRef vector(const std::string& name, int64_t n) const { return floats(name, {{n}}); }
  // A float tensor (F32, BF16 or F16) whose shape is one of `shapes`; throws otherwise.
  TensorRef floats(const std::string& name, const std::vector<std::vector<int64_t>>& shapes) const;

  // Reads a tensor's bytes into dst (nbytes of it). Expert reads go through ExpertReader instead.
  void read(const TensorRef& t, void* dst) const;
  const std::string& shard_path(int shard) const { return shards_[shard].file->path(); }
  const ReadOnlyFile& shard_file(int shard) const { return *shards_[shard].file; }
  int shard_count() const { return static_cast<int>(shards_.size()); }

  // Every tensor, for inspect.
  std::vector<TensorRef> all_tensors() const;
  // Full names of the tensors no lookup has found so far (sorted): once a model is built, the
  // checkpoint's tensors its config does not describe.
  std::vector<std::string> unused_tensors() const;

 private:
  struct Shard {
    std::unique_ptr<ReadOnlyFile> file;
    SafetensorsHeader header;
    std::unordered_map<std::string_view, const TensorInfo*> by_name;  // into header.tensors
  };

  WeightIndex() = default;
  int add_shard(const std::string& filename);
  void index_sharded(const std::string& index_path);
  void detect_prefix(const std::string& anchor);
  std::string where(const std::string& name) const;  // "file: tensor 'full.name'"
  MatrixRef block_fp8(MatrixRef m, const std::string& name) const;
  MatrixRef packed(MatrixRef m, const std::string& base) const;

  std::string dir_;
  std::string prefix_;
  std::vector<Shard> shards_;
  std::unordered_map<std::string, TensorRef> tensors_;          // full names
  mutable std::unordered_set<const TensorInfo*> found_;         // every tensor find() returned
};

}  // namespace deltafin
