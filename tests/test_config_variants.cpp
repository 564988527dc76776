// The config.json and tensor-name variants real checkpoints use: a Kimi K2.5-style wrapper
// (outer model_type kimi_k25, the text model in `text_config`, tensors under `language_model.`)
// gives the same logits as the plain layout; v4/v5 rope spellings are covered by the fixtures.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <deltafin/engine.hpp>

#include "test_util.hpp"
#include "weights/model_config.hpp"
#include "weights/safetensors.hpp"

namespace fs = std::filesystem;
using namespace deltafin;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rewrites a shard with every tensor name prefixed by `prefix`.
void write_prefixed_shard(const fs::path& from, const fs::path& to, const std::string& prefix) {
  const SafetensorsHeader h = read_safetensors_header(from.string());
  const std::string bytes = slurp(from);
  std::string json = "{";
  for (const TensorInfo& t : h.tensors) {
    if (json.size() > 1) json += ",";
    json += fmt::format("\"{}{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", prefix, t.name,
                        dtype_name(t.dtype), fmt::join(t.shape, ","), t.offset - h.data_start,
                        t.offset - h.data_start + t.nbytes);
  }
  json += "}";
  const uint64_t len = json.size();
  std::ofstream out(to, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << json << bytes.substr(h.data_start);
}

std::vector<float> logits_of(const std::string& dir, const std::vector<int32_t>& ids) {
  EngineOptions o;
  o.model_dir = dir;
  return Engine::open(o)->new_session()->append(ids, true);
}

}  // namespace

TEST_CASE("a K2.5-style nested text_config with language_model. tensors loads and gives the same logits",
          "[config]") {
  const fs::path src = test::fixture("k2_tiny");
  const fs::path dir = fs::temp_directory_path() / ("deltafin-k25-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string text_config = slurp(src / "config.json");
  std::ofstream(dir / "config.json") << "{\"architectures\": [\"KimiK25ForConditionalGeneration\"], "
                                        "\"model_type\": \"kimi_k25\", \"text_config\": " << text_config << "}";
  std::string index = slurp(src / "model.safetensors.index.json");
  for (size_t at = 0; (at = index.find("\"model.", at)) != std::string::npos; at += 17) index.insert(at + 1, "language_model.");
  for (size_t at = 0; (at = index.find("\"lm_head.", at)) != std::string::npos; at += 17) index.insert(at + 1, "language_model.");
  std::ofstream(dir / "model.safetensors.index.json") << index;
  for (const char* shard : {"model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"})
    write_prefixed_shard(src / shard, dir / shard, "language_model.");

  const ModelConfig c = load_model_config((dir / "config.json").string());
  CHECK(c.outer_model_type == "kimi_k25");
  CHECK(c.model_type == "kimi_k2");
  const auto ids = test::read_golden(src.string()).all();
  const auto expected = logits_of(src.string(), ids);
  const auto got = logits_of(dir.string(), ids);
  REQUIRE(got.size() == expected.size());
  CHECK(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
  const auto inspect = test::run_deltafin("inspect -m " + dir.string());
  CHECK(inspect.exit_code == 0);
  CHECK(inspect.output.find("wrapped in kimi_k25") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("config.json spellings: v4 rope_scaling and v5 rope_parameters give the same rope", "[config]") {
  const std::string base = R"("model_type": "kimi_k2", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 1, "kv_lora_rank": 4, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4,
    "intermediate_size": 8, "max_position_embeddings": 2048)";
  const ModelConfig v4 = parse_model_config("{" + base + R"(, "rope_theta": 50000.0, "rope_scaling": {"type": "yarn",
    "factor": 32.0, "original_max_position_embeddings": 64, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0,
    "mscale_all_dim": 1.0}})", "v4/config.json");
  const ModelConfig v5 = parse_model_config("{" + base + R"(, "rope_parameters": {"rope_type": "yarn",
    "rope_theta": 50000.0, "factor": 32.0, "original_max_position_embeddings": 64, "beta_fast": 1.0,
    "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}})", "v5/config.json");
  for (const ModelConfig* c : {&v4, &v5}) {
    CHECK(c->rope.yarn);
    CHECK(c->rope.theta == 50000.0f);
    CHECK(c->rope.factor == 32.0f);
    CHECK(c->rope.original_max_position_embeddings == 64);
    // Kimi K2's softmax scale: qk_head_dim^-0.5 * (0.1 ln 32 + 1)^2 (spec: 0.1308608 at qk_head_dim 192).
    CHECK(c->softmax_scale() == Approx(1.8132597 / std::sqrt(8.0)).epsilon(1e-6));
    CHECK(c->rope_attention_factor() == 1.0f);
  }
  REQUIRE_THROWS_WITH(parse_model_config("{" + base + R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0}})", "x/config.json"),
                      Catch::Contains("x/config.json") && Catch::Contains("dynamic"));
}

TEST_CASE("config.json integers out of range are refused, not cast (fuzzer finding)", "[config]") {
  REQUIRE_THROWS_WITH(parse_model_config(R"({"model_type": "kimi_k2", "vocab_size": 5.5e80})", "big/config.json"),
                      Catch::Contains("big/config.json") && Catch::Contains("'vocab_size' is out of range"));
  REQUIRE_THROWS_WITH(parse_model_config(R"({"model_type": "kimi_k2", "vocab_size": 3000000000})", "big/config.json"),
                      Catch::Contains("out of range"));
}
