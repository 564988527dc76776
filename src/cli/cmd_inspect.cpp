// `deltafin inspect -m DIR`: architecture, layer and expert counts, parameters by dtype, and the
// routed-expert bytes one token reads. Reads headers only, never tensor data; a directory that
// holds only config.json is described from the config alone.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "cli/commands.hpp"
#include "util/human_bytes.hpp"
#include "model/k2_model.hpp"
#include "model/k3_model.hpp"
#include "weights/model_family.hpp"
#include "weights/model_size.hpp"

namespace deltafin::cli {
namespace {

namespace fs = std::filesystem;

bool has_weights(const std::string& dir) {
  return fs::exists(fs::path(dir) / "model.safetensors") || fs::exists(fs::path(dir) / "model.safetensors.index.json");
}

void print_k2(const ModelConfig& c) {
  int64_t moe = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe += c.is_moe_layer(l);
  std::printf("architecture   %s (DeepSeek-V3 architecture)%s%s\n", c.model_type.c_str(),
              c.outer_model_type.empty() ? "" : ", wrapped in ", c.outer_model_type.c_str());
  std::printf("layers         %lld (%lld dense, %lld MoE), hidden %lld, vocab %lld\n", (long long)c.num_hidden_layers,
              (long long)(c.num_hidden_layers - moe), (long long)moe, (long long)c.hidden_size, (long long)c.vocab_size);
  std::printf("attention      MLA, %lld heads, %s, kv_lora %lld, nope %lld + rope %lld, v %lld\n",
              (long long)c.num_attention_heads,
              c.q_lora_rank ? fmt::format("q_lora {}", c.q_lora_rank).c_str() : "direct q_proj",
              (long long)c.kv_lora_rank, (long long)c.qk_nope_head_dim, (long long)c.qk_rope_head_dim,
              (long long)c.v_head_dim);
  std::printf("rope           theta %g, %s\n", c.rope.theta,
              c.rope.yarn ? fmt::format("YaRN factor {} over {} positions", c.rope.factor,
                                        c.rope.original_max_position_embeddings).c_str() : "no scaling");
  std::printf("experts        %lld routed per MoE layer, top-%lld, %lld shared, groups %lld (top %lld), width %lld%s\n",
              (long long)c.n_routed_experts, (long long)c.num_experts_per_tok, (long long)c.n_shared_experts,
              (long long)c.n_group, (long long)c.topk_group, (long long)c.moe_intermediate_size,
              c.int4_experts ? ", INT4 group-32" : c.fp8_block_quantized ? ", block-FP8" : "");
}

void print_k3(const K3Config& c) {
  int64_t mla = 0, moe = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    mla += c.is_mla[l];
    moe += c.is_moe_layer(l);
  }
  std::printf("architecture   Kimi K3 (KDA + gated MLA hybrid, attention residuals, latent MoE)\n");
  std::printf("layers         %lld (%lld KDA, %lld gated MLA; %lld dense, %lld MoE), hidden %lld, vocab %lld\n",
              (long long)c.num_hidden_layers, (long long)(c.num_hidden_layers - mla), (long long)mla,
              (long long)(c.num_hidden_layers - moe), (long long)moe, (long long)c.hidden_size, (long long)c.vocab_size);
  std::printf("attention      KDA %lld heads x %lld, conv %lld, gate bound %g; MLA %lld heads, q_lora %lld, kv_lora %lld, no RoPE\n",
              (long long)c.kda_heads, (long long)c.kda_head_dim, (long long)c.conv_kernel, c.gate_lower_bound,
              (long long)c.num_attention_heads, (long long)c.q_lora_rank, (long long)c.kv_lora_rank);
  std::printf("residuals      attention residuals, blocks of %lld layers\n", (long long)c.attn_res_block_size);
  std::printf("experts        %lld routed per MoE layer, top-%lld, latent %lld, width %lld, %lld shared%s\n",
              (long long)c.num_experts, (long long)c.num_experts_per_token, (long long)c.latent_size,
              (long long)c.moe_intermediate_size, (long long)c.num_shared_experts, c.mxfp4_experts ? ", MXFP4" : "");
}

void print_bytes(const char* source, uint64_t routed, uint64_t per_token, uint64_t spine, int64_t moe_layers, int64_t top_k) {
  std::printf("bytes          %.6f GB routed experts, %.6f GB spine (%s)\n", routed / 1e9, spine / 1e9, source);
  std::printf("per token      %.6f GB of routed experts read (%lld MoE layers x top-%lld)\n", per_token / 1e9,
              (long long)moe_layers, (long long)top_k);
}

// Parameters by dtype and routed bytes from the tensors themselves.
void print_tensors(const WeightIndex& index, const ExpertTable& experts, int64_t top_k, int64_t n_experts) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (elements, bytes)
  uint64_t total = 0, routed = 0, per_token = 0;
  int64_t moe = 0;
  for (const TensorRef& t : index.all_tensors()) {
    auto& [elements, bytes] = by_dtype[std::string(dtype_name(t.info->dtype))];
    elements += t.info->numel();
    bytes += t.info->nbytes;
    total += t.info->nbytes;
  }
  for (int64_t l = 0; l < experts.layers(); ++l) {
    if (!experts.has(l)) continue;
    ++moe;
    routed += experts.layer_bytes(l);
    per_token += experts.layer_bytes(l) / n_experts * top_k;  // experts of a layer are equal-sized
  }
  for (const auto& [dtype, counts] : by_dtype)
    std::printf("params %-7s %llu (%.6f GB)\n", dtype.c_str(), (unsigned long long)counts.first, counts.second / 1e9);
  print_bytes("from the tensors", routed, per_token, total - routed, moe, top_k);
}

// What both families print after their architecture lines: parameters and bytes from the config,
// then, when the directory holds weights, from the tensors themselves.
template <class Config, class MakeExpertTable>
void print_sizes(const std::string& dir, bool weights, const Config& c, const ModelBytes& b,
                 MakeExpertTable expert_table, int64_t top_k, int64_t experts) {
  int64_t moe = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe += c.is_moe_layer(l);
  std::printf("parameters     %.4f B (from config.json)\n", b.parameters / 1e9);
  std::printf("kv cache       %s per position (float32 latent cache)", human_bytes(b.kv_per_position).c_str());
  if (c.max_position_embeddings > 0)
    std::printf(", %s at the full context of %lld", human_bytes(b.kv_per_position * c.max_position_embeddings).c_str(),
                (long long)c.max_position_embeddings);
  if (b.recurrent_state) std::printf("; recurrent state %s", human_bytes(b.recurrent_state).c_str());
  std::printf("\n");
  if (!weights) return print_bytes("from config.json", b.routed, b.routed_per_token, b.spine, moe, top_k);
  const auto index = WeightIndex::open(dir);
  print_tensors(*index, expert_table(*index, c), top_k, experts);
}

int inspect(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const ModelFamily family = detect_model_family(config_path);
  const bool weights = has_weights(dir);
  std::printf("model          %s%s\n", dir.c_str(), weights ? "" : " (config.json only)");
  if (family == ModelFamily::KimiK2) {
    const ModelConfig c = load_model_config(config_path);
    print_k2(c);
    print_sizes(dir, weights, c, k2_bytes_from_config(c), k2_expert_table, c.num_experts_per_tok, c.n_routed_experts);
  } else {
    const K3Config c = load_k3_config(config_path);
    print_k3(c);
    print_sizes(dir, weights, c, k3_bytes_from_config(c), k3_expert_table, c.num_experts_per_token, c.num_experts);
  }
  return 0;
}

}  // namespace

Command register_inspect(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a model directory (headers only; config.json alone works)");
  sub->add_option("-m,--model", *dir, "Model directory (default: the bundled model)");
  return {sub, [dir] { return inspect(model_dir_or_default(*dir)); }};
}

}  // namespace deltafin::cli
