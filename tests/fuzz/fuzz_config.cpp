// libFuzzer target: config.json parsing of both model families and of K3's DSpark drafter and
// EAGLE-3 head (against a target of the tiny fixture's shapes). Any input must either parse
// into a configuration that passed validation or be refused with deltafin::Error; anything
// else (a crash, a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/error.hpp"
#include "weights/dspark_config.hpp"
#include "weights/eagle3_config.hpp"
#include "weights/k3_config.hpp"
#include "weights/model_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  try {
    const deltafin::ModelConfig c = deltafin::parse_model_config(json, "fuzz/config.json");
    if (c.hidden_size <= 0 || c.num_hidden_layers <= 0) __builtin_trap();  // validation let it through
  } catch (const deltafin::Error&) {
  }
  try {
    const deltafin::K3Config c = deltafin::parse_k3_config(json, "fuzz/config.json");
    if (static_cast<int64_t>(c.is_mla.size()) != c.num_hidden_layers) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  try {
    const deltafin::DSparkConfig c = deltafin::parse_dspark_config(json, "fuzz/config.json");
    if (c.target_layer_ids.empty() || c.attention.qk_rope_head_dim % 2 || c.mask_token_id >= c.vocab_size) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  try {
    deltafin::K3Config target;
    target.vocab_size = 320, target.hidden_size = 48, target.num_hidden_layers = 13;
    const deltafin::Eagle3Config c = deltafin::parse_eagle3_config(json, "fuzz/config.json", target);
    for (int64_t layer : c.target_layers)
      if (layer < 0 || layer >= target.num_hidden_layers) __builtin_trap();
    if (c.attention.qk_rope_head_dim % 2 || c.vocab_size != target.vocab_size) __builtin_trap();
  } catch (const deltafin::Error&) {
  }
  return 0;
}
