// load_expert_table (see model_experts.hpp).
#include "model/model_experts.hpp"

#include <filesystem>

#include "model/k2_model.hpp"
#include "model/k3_model.hpp"
#include "util/error.hpp"
#include "weights/model_family.hpp"

namespace deltafin {

ExpertTable load_expert_table(const std::string& model_dir, const WeightIndex& index) {
  const std::string config = (std::filesystem::path(model_dir) / "config.json").string();
  switch (detect_model_family(config)) {
    case ModelFamily::KimiK2: return k2_expert_table(index, load_model_config(config));
    case ModelFamily::KimiK3: return k3_expert_table(index, load_k3_config(config));
  }
  fail("{}: unknown model family", config);
}

}  // namespace deltafin
