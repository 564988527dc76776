// Which architecture a config.json describes, from its model_type (outer or nested text_config).
#pragma once

#include <string>

namespace deltafin {

enum class ModelFamily {
  KimiK2,  // DeepSeek-V3 architecture: deepseek_v3, kimi_k2 (also nested, as in K2.5)
  KimiK3,  // KDA + gated MLA hybrid: kimi_k3 with a kimi_linear text_config
};

// Reads `config_path`; throws deltafin::Error naming the file when the type is unknown.
ModelFamily detect_model_family(const std::string& config_path);

}  // namespace deltafin
