// Bad model directories through the CLI: each gives one line "deltafin: ..." naming the file
// and tensor involved, and a non-zero exit; never a crash.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.hpp"

namespace fs = std::filesystem;
using deltafin::test::run_deltafin;
using deltafin::test::ScratchModel;
using deltafin::test::expect_model_error;

TEST_CASE("a truncated shard names the file and a tensor past its end", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  const std::string bytes = m.read("model.safetensors");
  m.write("model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_model_error(m, {"model.safetensors", "tensor '"});
}

TEST_CASE("a file shorter than its length prefix", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.write("model.safetensors", std::string("\x10\x00\x00", 3));
  expect_model_error(m, {"model.safetensors", "truncated"});
}

TEST_CASE("a header length past the end of the file", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  std::string bytes = m.read("model.safetensors");
  bytes[6] = '\x01';  // N ~ 2^48
  m.write("model.safetensors", bytes);
  expect_model_error(m, {"model.safetensors", "past the end"});
}

TEST_CASE("a broken JSON header", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.patch("model.safetensors", "{\"", "{{");
  expect_model_error(m, {"model.safetensors", "JSON"});
}

TEST_CASE("an unknown dtype", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.patch("model.safetensors", "\"F16\"", "\"Q16\"");
  expect_model_error(m, {"model.safetensors", "Q16"});
}

TEST_CASE("a dtype the model cannot use for a weight", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.patch("model.safetensors", "\"dtype\":\"F32\",\"shape\":[64]", "\"dtype\":\"I32\",\"shape\":[64]");
  expect_model_error(m, {"model.safetensors", "I32", "tensor 'model."});
}

TEST_CASE("a shape disagreeing with config.json", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.patch("config.json", "\"moe_intermediate_size\": 16", "\"moe_intermediate_size\": 17");
  expect_model_error(m, {"model.safetensors", "mlp.experts.0.gate_proj.weight", "[16, 64]", "[17, 64]"});
}

TEST_CASE("a missing tensor", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.patch("model.safetensors", "experts.5.up_proj", "experts.5.uq_proj");
  expect_model_error(m, {"model.layers.", "experts.5.up_proj.weight", "missing"});
}

TEST_CASE("a missing shard", "[bad-input]") {
  ScratchModel m("k2_tiny");
  fs::remove(m.dir / "model-00002-of-000002.safetensors");
  expect_model_error(m, {"model-00002-of-000002.safetensors", "cannot open"});
}

TEST_CASE("an index entry whose shard lacks the tensor", "[bad-input]") {
  ScratchModel m("k2_tiny");
  m.patch("model.safetensors.index.json", "\"lm_head.weight\": \"model-00001-of-000002.safetensors\"",
          "\"lm_head.weight\": \"model-00002-of-000002.safetensors\"");
  expect_model_error(m, {"lm_head.weight", "does not contain it"});
}

TEST_CASE("config.json missing a field", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.patch("config.json", "\"hidden_size\"", "\"hidden_sizX\"");
  expect_model_error(m, {"config.json", "missing field 'hidden_size'"});
}

TEST_CASE("config.json that is not JSON", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.write("config.json", "{\"model_type\": ");
  expect_model_error(m, {"config.json", "broken JSON"});
}

TEST_CASE("an fp8 weight without its scale", "[bad-input]") {
  ScratchModel m("k2_tiny_fp8");
  // Rename the scale everywhere it is named, so that the weight is left without one.
  for (const auto& entry : fs::directory_iterator(m.dir)) {
    const std::string name = entry.path().filename().string();
    if (m.read(name).find("layers.0.self_attn.o_proj.weight_scale_inv") != std::string::npos)
      m.patch(name, "layers.0.self_attn.o_proj.weight_scale_inv", "layers.0.self_attn.o_proj.weight_scale_inX");
  }
  expect_model_error(m, {"model.layers.0.self_attn.o_proj.weight", "_scale_inv", "missing"});
}

TEST_CASE("nonsense flags and token lists", "[bad-input]") {
  const std::string dir = deltafin::test::fixture("dsv3_tiny");
  for (const std::string& args : std::vector<std::string>{"run -m " + dir + " --tokens 1,x,3 -n 2 --ids",
                                  "run -m " + dir + " --tokens 1,99999 -n 2 --ids",
                                  std::string("run -m /nonexistent --tokens 1 -n 2 --ids"),
                                  "logits -m " + dir + " --tokens 1 --out /nonexistent/dir/x.npy",
                                  "run -m " + dir + " --tokens 1 -n 2 --ids --cache-gb -1"}) {
    const auto r = run_deltafin(args);
    INFO(args << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.rfind("deltafin: ", 0) == 0);
  }
}

// Issue 12, item 10: what transformers does with the same directory, and reasons named.
TEST_CASE("model.safetensors beside an index: the single file is loaded, as transformers does", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.write("model.safetensors.index.json", R"({"metadata": {}, "weight_map": {"lm_head.weight": "absent.safetensors"}})");
  const auto r = run_deltafin("logits -m " + m.dir.string() + " --tokens 1,2,3 --out " + (m.dir / "out.npy").string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("loading model.safetensors (as transformers does) and ignoring the index") != std::string::npos);
  CHECK(std::filesystem::exists(m.dir / "out.npy"));
}

TEST_CASE("checkpoint tensors the config does not describe are reported", "[bad-input]") {
  ScratchModel m("k3_tiny");
  m.patch("config.json", "\"num_hidden_layers\": 13", "\"num_hidden_layers\": 12");
  const auto r = run_deltafin("run -m " + m.dir.string() + " --tokens 1,2 --ids -n 1 --placement none");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("46 tensor(s) of the checkpoint are not used by its config.json (first: "
                      "'language_model.model.layers.12.") != std::string::npos);
  // A DeepSeek-V3 checkpoint's multi-token-prediction layer (model.layers.<num_hidden_layers>) is expected.
  ScratchModel mtp("dsv3_tiny");
  mtp.patch("config.json", "\"num_hidden_layers\": 4", "\"num_hidden_layers\": 3");
  const auto quiet = run_deltafin("run -m " + mtp.dir.string() + " --tokens 1,2 --ids -n 1 --placement none");
  INFO(quiet.output);
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.output.find("not used") == std::string::npos);
  mtp.patch("config.json", "\"num_nextn_predict_layers\": 1", "\"num_nextn_predict_layers\": 0");
  CHECK(run_deltafin("run -m " + mtp.dir.string() + " --tokens 1,2 --ids -n 1 --placement none").output.find(
            "tensor(s) of the checkpoint are not used") != std::string::npos);
}

TEST_CASE("a config.json that cannot be opened names the reason", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  std::filesystem::remove(m.dir / "config.json");
  std::filesystem::create_symlink("config.json", m.dir / "config.json");  // a loop
  expect_model_error(m, {"config.json: cannot open config.json: Too many levels of symbolic links"});
}
