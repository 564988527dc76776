// `deltafin inspect -m DIR`: architecture, layer and expert counts, parameters by dtype, and
// the routed-expert bytes one token reads. Reads headers only, never tensor data.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>

#include "cli/commands.hpp"
#include "weights/weight_index.hpp"

namespace deltafin::cli {
namespace {

int inspect(const std::string& dir) {
  const auto index = WeightIndex::open(dir);
  const ModelConfig& c = index->config();
  int64_t moe_layers = 0;
  uint64_t routed_bytes = 0, token_bytes = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!index->has_experts(l)) continue;
    ++moe_layers;
    uint64_t layer_bytes = 0;
    for (int64_t e = 0; e < c.n_routed_experts; ++e) layer_bytes += index->expert(l, e).bytes();
    routed_bytes += layer_bytes;
    token_bytes += layer_bytes / c.n_routed_experts * c.num_experts_per_tok;  // experts of a layer are equal-sized
  }
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (elements, bytes)
  uint64_t total_bytes = 0;
  for (const TensorRef& t : index->all_tensors()) {
    auto& [elements, bytes] = by_dtype[std::string(dtype_name(t.info->dtype))];
    elements += t.info->numel();
    bytes += t.info->nbytes;
    total_bytes += t.info->nbytes;
  }
  std::printf("model          %s\n", dir.c_str());
  std::printf("architecture   %s (DeepSeek-V3 architecture)%s%s\n", c.model_type.c_str(),
              c.outer_model_type.empty() ? "" : ", wrapped in ", c.outer_model_type.c_str());
  std::printf("layers         %lld (%lld dense, %lld MoE), hidden %lld, vocab %lld\n", (long long)c.num_hidden_layers,
              (long long)(c.num_hidden_layers - moe_layers), (long long)moe_layers, (long long)c.hidden_size,
              (long long)c.vocab_size);
  std::printf("attention      MLA, %lld heads, %s, kv_lora %lld, nope %lld + rope %lld, v %lld\n",
              (long long)c.num_attention_heads,
              c.q_lora_rank ? fmt::format("q_lora {}", c.q_lora_rank).c_str() : "direct q_proj",
              (long long)c.kv_lora_rank, (long long)c.qk_nope_head_dim, (long long)c.qk_rope_head_dim,
              (long long)c.v_head_dim);
  std::printf("rope           theta %g, %s\n", c.rope.theta,
              c.rope.yarn ? fmt::format("YaRN factor {} over {} positions", c.rope.factor,
                                        c.rope.original_max_position_embeddings).c_str() : "no scaling");
  std::printf("experts        %lld routed per MoE layer, top-%lld, %lld shared, groups %lld (top %lld), width %lld\n",
              (long long)c.n_routed_experts, (long long)c.num_experts_per_tok, (long long)c.n_shared_experts,
              (long long)c.n_group, (long long)c.topk_group, (long long)c.moe_intermediate_size);
  for (const auto& [dtype, counts] : by_dtype)
    std::printf("params %-7s %llu (%.6f GB)\n", dtype.c_str(), (unsigned long long)counts.first, counts.second / 1e9);
  std::printf("bytes          %.6f GB in all: %.6f GB routed experts, %.6f GB spine\n", total_bytes / 1e9,
              routed_bytes / 1e9, (total_bytes - routed_bytes) / 1e9);
  std::printf("per token      %.6f GB of routed experts read (%lld layers x top-%lld)\n", token_bytes / 1e9,
              (long long)moe_layers, (long long)c.num_experts_per_tok);
  return 0;
}

}  // namespace

Command register_inspect(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a model directory (headers only)");
  sub->add_option("-m,--model", *dir, "Model directory")->required();
  return {sub, [dir] { return inspect(*dir); }};
}

}  // namespace deltafin::cli
