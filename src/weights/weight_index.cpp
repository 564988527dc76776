// WeightIndex: shards, headers, name lookup, format/shape checks and the routed-expert table.
#include "weights/weight_index.hpp"

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "util/error.hpp"
#include "util/input_file.hpp"

namespace deltafin {
namespace fs = std::filesystem;

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

std::unique_ptr<WeightIndex> WeightIndex::open(const std::string& dir, const std::string& anchor) {
  std::unique_ptr<WeightIndex> index(new WeightIndex());
  index->dir_ = dir;
  if (!fs::is_directory(dir)) fail("{}: not a model directory", dir);
  // As in transformers: a single model.safetensors is loaded even when an index lies beside it.
  const fs::path sharded = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(fs::path(dir) / "model.safetensors")) {
    if (fs::exists(sharded))
      spdlog::warn("{}: both model.safetensors and model.safetensors.index.json exist; loading model.safetensors "
                   "(as transformers does) and ignoring the index", dir);
    index->add_shard("model.safetensors");
    for (const TensorInfo& t : index->shards_[0].header.tensors) index->tensors_[t.name] = {&t, 0};
  } else if (fs::exists(sharded)) {
    index->index_sharded(sharded.string());
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
  index->detect_prefix(anchor);
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
  const std::string text = read_input_file(index_path, "the index");
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

void WeightIndex::detect_prefix(const std::string& anchor) {
  for (const auto& [name, ref] : tensors_) {
    if (name.size() >= anchor.size() && name.compare(name.size() - anchor.size(), anchor.size(), anchor) == 0) {
      prefix_ = name.substr(0, name.size() - anchor.size());
      return;
    }
  }
  fail("{}: tensor '{}' is missing", dir_, anchor);
}

std::string WeightIndex::where(const std::string& name) const {
  auto it = tensors_.find(prefix_ + name);
  const std::string file = it == tensors_.end() ? dir_ : shard_path(it->second.shard);
  return fmt::format("{}: tensor '{}'", file, prefix_ + name);
}

const TensorRef* WeightIndex::find(const std::string& name) const {
  auto it = tensors_.find(prefix_ + name);
  if (it == tensors_.end()) return nullptr;
  found_.insert(it->second.info);
  return &it->second;
}

MatrixRef WeightIndex::matrix(const std::string& base, int64_t rows, int64_t cols) const {
  MatrixRef m;
  m.name = prefix_ + base;
  m.rows = rows;
  m.cols = cols;
  const std::string name = base + ".weight";
  const TensorRef* t = find(name);
  if (!t) {
    if (find(base + ".weight_packed")) return packed(m, base);
    fail("{}: tensor '{}' is missing", dir_, prefix_ + name);
  }
  m.weight = *t;
  if (t->info->shape != std::vector<int64_t>{rows, cols})
    fail("{} has shape {} but config.json implies [{}, {}]", where(name), shape_string(t->info->shape), rows, cols);
  switch (t->info->dtype) {
    case DType::F32: m.format = WeightFormat::F32; return m;
    case DType::F16: m.format = WeightFormat::F16; return m;
    case DType::BF16: m.format = WeightFormat::BF16; return m;
    case DType::F8_E4M3: return block_fp8(m, name);
    default: fail("{} has dtype {}, which is not a supported weight format", where(name), dtype_name(t->info->dtype));
  }
}

MatrixRef WeightIndex::block_fp8(MatrixRef m, const std::string& name) const {
  const std::string scale_name = name + "_scale_inv";
  const TensorRef* s = find(scale_name);
  if (!s) fail("{} is F8_E4M3 but '{}' is missing", where(name), prefix_ + scale_name);
  const std::vector<int64_t> want{(m.rows + 127) / 128, (m.cols + 127) / 128};
  if (s->info->shape != want)
    fail("{} has shape {} but 128x128 blocks of [{}, {}] need {}", where(scale_name), shape_string(s->info->shape),
         m.rows, m.cols, shape_string(want));
  if (s->info->dtype != DType::F32) fail("{} has dtype {}, expected F32", where(scale_name), dtype_name(s->info->dtype));
  m.format = WeightFormat::F8_E4M3_BLOCK128;
  m.scale = *s;
  return m;
}

MatrixRef WeightIndex::packed(MatrixRef m, const std::string& base) const {
  const std::string packed_name = base + ".weight_packed", scale_name = base + ".weight_scale";
  m.weight = *find(packed_name);
  const TensorInfo& w = *m.weight.info;
  const TensorRef* s = find(scale_name);
  if (!s) fail("{} has no '{}'", where(packed_name), prefix_ + scale_name);
  m.scale = *s;
  std::vector<int64_t> want_packed, want_scale;
  DType want_scale_dtype;
  if (w.dtype == DType::U8) {  // MXFP4: two E2M1 codes a byte, one E8M0 exponent per 32 columns
    if (m.cols % 32) fail("{}: MXFP4 needs a multiple of 32 columns, config.json implies {}", where(packed_name), m.cols);
    m.format = WeightFormat::MXFP4;
    want_packed = {m.rows, m.cols / 2};
    want_scale = {m.rows, m.cols / 32};
    want_scale_dtype = DType::U8;
  } else if (w.dtype == DType::I32) {  // INT4: eight offset-binary nibbles a word, one BF16 scale per 32
    m.format = WeightFormat::INT4_G32;
    want_packed = {m.rows, (m.cols + 7) / 8};
    want_scale = {m.rows, (m.cols + 31) / 32};
    want_scale_dtype = DType::BF16;
  } else {
    fail("{} has dtype {}: not a known packed format (U8 for MXFP4, I32 for INT4)", where(packed_name), dtype_name(w.dtype));
  }
  if (w.shape != want_packed)
    fail("{} has shape {} but [{}, {}] needs {} packed", where(packed_name), shape_string(w.shape), m.rows, m.cols,
         shape_string(want_packed));
  if (s->info->shape != want_scale || s->info->dtype != want_scale_dtype)
    fail("{} is {} {} but [{}, {}] needs {} {}", where(scale_name), dtype_name(s->info->dtype),
         shape_string(s->info->shape), m.rows, m.cols, dtype_name(want_scale_dtype), shape_string(want_scale));
  if (const TensorRef* shape = find(base + ".weight_shape")) {
    const TensorInfo& info = *shape->info;
    if (info.shape != std::vector<int64_t>{2} || (info.dtype != DType::I32 && info.dtype != DType::I64))
      fail("{} must be 2 integers", where(base + ".weight_shape"));
    int64_t dims[2];
    if (info.dtype == DType::I64) {
      read(*shape, dims);
    } else {
      int32_t d32[2];
      read(*shape, d32);
      dims[0] = d32[0];
      dims[1] = d32[1];
    }
    if (dims[0] != m.rows || dims[1] != m.cols)
      fail("{} says [{}, {}] but config.json implies [{}, {}]", where(base + ".weight_shape"), dims[0], dims[1],
           m.rows, m.cols);
  }
  return m;
}

TensorRef WeightIndex::floats(const std::string& name, const std::vector<std::vector<int64_t>>& shapes) const {
  const TensorRef* t = find(name);
  if (!t) fail("{}: tensor '{}' is missing", dir_, prefix_ + name);
  if (std::find(shapes.begin(), shapes.end(), t->info->shape) == shapes.end()) {
    std::vector<std::string> wanted;
    for (const auto& s : shapes) wanted.push_back(shape_string(s));
    fail("{} has shape {} but config.json implies {}", where(name), shape_string(t->info->shape),
         fmt::join(wanted, " or "));
  }
  const DType d = t->info->dtype;
  if (d != DType::F32 && d != DType::BF16 && d != DType::F16)
    fail("{} has dtype {}, expected F32, BF16 or F16", where(name), dtype_name(d));
  return *t;
}

void WeightIndex::read(const TensorRef& t, void* dst) const {
  shards_[t.shard].file->read_exact(dst, t.info->nbytes, t.info->offset);
}

std::vector<TensorRef> WeightIndex::all_tensors() const {
  std::vector<TensorRef> out;
  out.reserve(tensors_.size());
  for (const auto& [name, ref] : tensors_) out.push_back(ref);
  return out;
}

std::vector<std::string> WeightIndex::unused_tensors() const {
  std::vector<std::string> out;
  for (const auto& [name, ref] : tensors_)
    if (!found_.count(ref.info)) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace deltafin
