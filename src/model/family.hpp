// A model family: what the engine and the commands (place, verify, inspect) need to know of one
// architecture. Each family defines its Family at the end of its model file (model/k2_model.cpp,
// model/k3_model.cpp) and, in its model header, the traits struct the engine template takes
// (decode/model_engine.hpp); model/families.cpp lists the families, decode/family_engines.cpp
// pairs each with its engine. A new family is its model file, its config parser (weights/) and one
// line in each list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weights/expert_table.hpp"
#include "weights/model_size.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

// What `deltafin inspect` prints of a config.json.
struct FamilyDescription {
  std::vector<std::string> lines;  // "architecture ...", "layers ...": label padded to 15 columns
  ModelBytes bytes;
  int64_t layers = 0, moe_layers = 0;
  int64_t experts = 0, top_k = 0;  // routed experts per MoE layer, chosen per token
  int64_t context = 0;             // max_position_embeddings (0: not stated)
  int64_t expert_input = 0;        // the routed experts' input and output width (hidden; K3: the latent)
};

struct Family {
  const char* model_types;  // for messages: "kimi_k2, deepseek_v3"
  // Whether config.json's model_type (outer) and text_config.model_type (text, "" when absent) are this family's.
  bool (*matches)(std::string_view outer, std::string_view text);
  FamilyDescription (*describe)(const std::string& config_path);
  ExpertTable (*expert_table)(const std::string& config_path, const WeightIndex& index);
};

extern const Family kKimiK2Family;  // DeepSeek-V3 architecture: deepseek_v3, kimi_k2 (also nested, as in K2.5)
extern const Family kKimiK3Family;  // KDA + gated MLA hybrid: kimi_k3 with a kimi_linear text_config

// The family of <config_path>; throws deltafin::Error naming the file and the type when none matches.
const Family& family_of(const std::string& config_path);

// The routed-expert table of a checkpoint directory, without loading the model (place, verify).
ExpertTable load_expert_table(const std::string& model_dir, const WeightIndex& index);

}  // namespace deltafin
