// Each model family's engine: the engine template (decode/model_engine.hpp) over the family's
// traits (model/k2_model.hpp, model/k3_model.hpp). The model layer defines the families; the
// engines are opened here, one layer up.
#include <array>
#include <memory>
#include <utility>

#include "decode/model_engine.hpp"
#include "model/family.hpp"
#include "model/k2_model.hpp"
#include "model/k3_model.hpp"
#include "util/error.hpp"

namespace deltafin {
namespace {

template <class Traits>
std::unique_ptr<Engine> open_model_engine(const EngineOptions& o) {
  return std::make_unique<ModelEngine<Traits>>(o);
}

using OpenEngine = std::unique_ptr<Engine> (*)(const EngineOptions&);
const std::array<std::pair<const Family*, OpenEngine>, 2> kEngines = {{
    {&kKimiK2Family, open_model_engine<K2Traits>},
    {&kKimiK3Family, open_model_engine<K3Traits>},
}};

}  // namespace

std::unique_ptr<Engine> open_family_engine(const Family& family, const EngineOptions& options) {
  for (const auto& [f, open] : kEngines)
    if (f == &family) return open(options);
  fail("model family '{}' has no engine", family.model_types);
}

}  // namespace deltafin
