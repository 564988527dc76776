// Which spine tensors get placed records (see spine_tensors.hpp).
#include "weights/spine_tensors.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <unordered_set>

#include "weights/expert_record.hpp"

namespace deltafin {
namespace {

// The layer of "model.layers.N...." (after the root prefix), or -1.
int64_t layer_of(std::string_view rest) {
  constexpr std::string_view kLayers = "model.layers.";
  if (rest.substr(0, kLayers.size()) != kLayers) return -1;
  const std::string_view digits = rest.substr(kLayers.size(), rest.find('.', kLayers.size()) - kLayers.size());
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(c); }))
    return -1;
  return std::stoll(std::string(digits));
}

}  // namespace

std::vector<TensorRef> placeable_spine_tensors(const WeightIndex& index, const ExpertTable& experts) {
  std::unordered_set<const TensorInfo*> expert_tensors;
  for (int64_t layer = 0; layer < experts.layers(); ++layer)
    if (experts.has(layer))
      for (int64_t e = 0; e < experts.experts(); ++e)
        for (int part = 0; part < 6; ++part)
          if (const TensorRef& t = record_part_tensor(experts.at(layer, e), part); t.info) expert_tensors.insert(t.info);
  std::vector<TensorRef> out;
  for (const TensorRef& t : index.all_tensors()) {
    const std::string& name = t.info->name;
    if (name.rfind(index.prefix(), 0) != 0 || t.info->shape.size() < 2 || t.info->nbytes == 0 || expert_tensors.count(t.info))
      continue;
    if (layer_of(std::string_view(name).substr(index.prefix().size())) >= experts.layers()) continue;
    out.push_back(t);
  }
  std::sort(out.begin(), out.end(), [](const TensorRef& a, const TensorRef& b) {
    return std::pair{a.shard, a.info->offset} < std::pair{b.shard, b.info->offset};
  });
  return out;
}

std::unordered_map<std::string, TensorRef> tensors_by_name(const WeightIndex& index) {
  std::unordered_map<std::string, TensorRef> out;
  for (const TensorRef& t : index.all_tensors()) out.emplace(t.info->name, t);
  return out;
}

}  // namespace deltafin
