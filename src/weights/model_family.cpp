// detect_model_family (see model_family.hpp).
#include "weights/model_family.hpp"

#include <simdjson.h>

#include "util/error.hpp"
#include "util/input_file.hpp"

namespace deltafin {

ModelFamily detect_model_family(const std::string& config_path) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const std::string json = read_input_file(config_path, "config.json", "(is this a model directory?)");
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", config_path, simdjson::error_message(err));
  std::string_view outer, text;
  if (root["model_type"].get_string().get(outer) != simdjson::SUCCESS) outer = {};
  if (root["text_config"]["model_type"].get_string().get(text) != simdjson::SUCCESS) text = {};
  const std::string_view type = text.empty() ? outer : text;
  if (outer == "kimi_k3" || type == "kimi_linear") return ModelFamily::KimiK3;
  if (type == "kimi_k2" || type == "deepseek_v3") return ModelFamily::KimiK2;
  fail("{}: model_type '{}' is not supported (expected kimi_k2, deepseek_v3 or kimi_k3)", config_path, type);
}

}  // namespace deltafin
