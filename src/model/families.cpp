// The supported model families, and which one a config.json describes (see model/family.hpp).
#include "model/family.hpp"

#include <simdjson.h>

#include <array>
#include <filesystem>

#include "util/error.hpp"
#include "util/input_file.hpp"

namespace deltafin {

namespace {
const std::array<const Family*, 2> kFamilies = {&kKimiK2Family, &kKimiK3Family};
}  // namespace

const Family& family_of(const std::string& config_path) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const std::string json = read_input_file(config_path, "config.json", "(is this a model directory?)");
  if (auto err = parser.parse(json).get(root)) fail("{}: broken JSON ({})", config_path, simdjson::error_message(err));
  std::string_view outer, text;
  if (root["model_type"].get_string().get(outer) != simdjson::SUCCESS) outer = {};
  if (root["text_config"]["model_type"].get_string().get(text) != simdjson::SUCCESS) text = {};
  std::string known;
  for (const Family* f : kFamilies) {
    if (f->matches(outer, text)) return *f;
    if (!known.empty()) known += ", ";
    known += f->model_types;
  }
  fail("{}: model_type '{}' is not supported (expected {})", config_path, text.empty() ? outer : text, known);
}

ExpertTable load_expert_table(const std::string& model_dir, const WeightIndex& index) {
  const std::string config = (std::filesystem::path(model_dir) / "config.json").string();
  return family_of(config).expert_table(config, index);
}

}  // namespace deltafin
