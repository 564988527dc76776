// WeightIndex: shards, headers, name lookup, format/shape checks and the routed-expert table.
#include "weights/weight_index.hpp"

#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.hpp"

namespace deltafin {
namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

const char* kProjNames[3] = {"gate_proj", "up_proj", "down_proj"};

}  // namespace

std::unique_ptr<WeightIndex> WeightIndex::open(const std::string& dir) {
  std::unique_ptr<WeightIndex> index(new WeightIndex());
  index->dir_ = dir;
  if (!fs::is_directory(dir)) fail("{}: not a model directory", dir);
  index->config_ = load_model_config((fs::path(dir) / "config.json").string());
  const fs::path sharded = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(sharded)) {
    index->index_sharded(sharded.string());
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    index->add_shard("model.safetensors");
    for (const TensorInfo& t : index->shards_[0].header.tensors) index->tensors_[t.name] = {&t, 0};
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
  index->detect_prefix();
  index->index_experts();
  return index;
}

int WeightIndex::add_shard(const std::string& filename) {
  for (size_t i = 0; i < shards_.size(); ++i)
    if (fs::path(shards_[i].file->path()).filename() == filename) return static_cast<int>(i);
  if (filename.find('/') != std::string::npos || filename == "..")
    fail("{}: shard name '{}' must be a plain file name", dir_, filename);
  Shard shard;
  shard.file = std::make_unique<ReadOnlyFile>((fs::path(dir_) / filename).string());
  shard.header = read_safetensors_header(shard.file->path());
  shards_.push_back(std::move(shard));
  for (const TensorInfo& t : shards_.back().header.tensors) shards_.back().by_name[t.name] = &t;
  return static_cast<int>(shards_.size() - 1);
}

void WeightIndex::index_sharded(const std::string& index_path) {
  const std::string text = read_text(index_path);
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(text).get(root)) fail("{}: broken JSON ({})", index_path, simdjson::error_message(err));
  simdjson::dom::object weight_map;
  if (root["weight_map"].get_object().get(weight_map) != simdjson::SUCCESS)
    fail("{}: missing object 'weight_map'", index_path);
  for (auto [key, value] : weight_map) {
    std::string_view file;
    if (value.get_string().get(file) != simdjson::SUCCESS)
      fail("{}: weight_map entry '{}' must name a shard file", index_path, key);
    const int shard = add_shard(std::string(file));
    auto it = shards_[shard].by_name.find(key);
    const TensorInfo* found = it == shards_[shard].by_name.end() ? nullptr : it->second;
    if (!found) fail("{}: tensor '{}' is listed in {} but the shard does not contain it", shard_path(shard), key, index_path);
    tensors_[std::string(key)] = {found, shard};
  }
}

void WeightIndex::detect_prefix() {
  const std::string anchor = "model.embed_tokens.weight";
  for (const auto& [name, ref] : tensors_) {
    if (name.size() >= anchor.size() && name.compare(name.size() - anchor.size(), anchor.size(), anchor) == 0) {
      prefix_ = name.substr(0, name.size() - anchor.size());
      return;
    }
  }
  fail("{}: tensor 'model.embed_tokens.weight' is missing", dir_);
}

std::string WeightIndex::where(const std::string& name) const {
  auto it = tensors_.find(prefix_ + name);
  const std::string file = it == tensors_.end() ? dir_ : shard_path(it->second.shard);
  return fmt::format("{}: tensor '{}'", file, prefix_ + name);
}

const TensorRef* WeightIndex::find(const std::string& name) const {
  auto it = tensors_.find(prefix_ + name);
  return it == tensors_.end() ? nullptr : &it->second;
}

MatrixRef WeightIndex::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  const TensorRef* t = find(name);
  if (!t) fail("{}: tensor '{}' is missing", dir_, prefix_ + name);
  const TensorInfo& info = *t->info;
  if (info.shape != std::vector<int64_t>{rows, cols})
    fail("{} has shape {} but config.json implies [{}, {}]", where(name), shape_string(info.shape), rows, cols);
  MatrixRef m;
  m.name = prefix_ + name;
  m.rows = rows;
  m.cols = cols;
  m.weight = *t;
  switch (info.dtype) {
    case DType::F32: m.format = WeightFormat::F32; break;
    case DType::F16: m.format = WeightFormat::F16; break;
    case DType::BF16: m.format = WeightFormat::BF16; break;
    case DType::F8_E4M3: {
      const std::string scale_name = name + "_scale_inv";
      const TensorRef* s = find(scale_name);
      if (!s) fail("{} is F8_E4M3 but '{}' is missing", where(name), prefix_ + scale_name);
      const std::vector<int64_t> want{(rows + 127) / 128, (cols + 127) / 128};
      if (s->info->shape != want)
        fail("{} has shape {} but 128x128 blocks of [{}, {}] need {}", where(scale_name),
             shape_string(s->info->shape), rows, cols, shape_string(want));
      if (s->info->dtype != DType::F32)
        fail("{} has dtype {}, expected F32", where(scale_name), dtype_name(s->info->dtype));
      m.format = WeightFormat::F8_E4M3_BLOCK128;
      m.scale = *s;
      break;
    }
    default:
      fail("{} has dtype {}, which is not a supported weight format", where(name), dtype_name(info.dtype));
  }
  return m;
}

TensorRef WeightIndex::vector(const std::string& name, int64_t n) const {
  const TensorRef* t = find(name);
  if (!t) fail("{}: tensor '{}' is missing", dir_, prefix_ + name);
  if (t->info->shape != std::vector<int64_t>{n})
    fail("{} has shape {} but config.json implies [{}]", where(name), shape_string(t->info->shape), n);
  const DType d = t->info->dtype;
  if (d != DType::F32 && d != DType::BF16 && d != DType::F16)
    fail("{} has dtype {}, expected F32, BF16 or F16", where(name), dtype_name(d));
  return *t;
}

void WeightIndex::index_experts() {
  const ModelConfig& c = config_;
  experts_.assign(c.num_hidden_layers, {});
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (!c.is_moe_layer(layer)) continue;
    experts_[layer].resize(c.n_routed_experts);
    for (int64_t e = 0; e < c.n_routed_experts; ++e) {
      ExpertRef& ref = experts_[layer][e];
      for (int p = 0; p < 3; ++p) {
        const std::string name = fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, e, kProjNames[p]);
        const bool down = p == kDownProj;
        ref.proj[p] = matrix(name, down ? c.hidden_size : c.moe_intermediate_size,
                             down ? c.moe_intermediate_size : c.hidden_size);
      }
    }
  }
}

const ExpertRef& WeightIndex::expert(int64_t layer, int64_t expert) const { return experts_[layer][expert]; }

bool WeightIndex::has_experts(int64_t layer) const { return !experts_[layer].empty(); }

void WeightIndex::read(const TensorRef& t, void* dst) const {
  shards_[t.shard].file->read_exact(dst, t.info->nbytes, t.info->offset);
}

std::vector<TensorRef> WeightIndex::all_tensors() const {
  std::vector<TensorRef> out;
  out.reserve(tensors_.size());
  for (const auto& [name, ref] : tensors_) out.push_back(ref);
  return out;
}

}  // namespace deltafin
