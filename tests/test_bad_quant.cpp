// Bad input in the quantized formats (MXFP4 on the K3 fixture): each gives one line naming the
// tensor, exit code 1, never a crash or wrong output.
#include <catch2/catch.hpp>

#include "test_util.hpp"
#include "weights/safetensors.hpp"

using deltafin::test::expect_model_error;
using deltafin::test::ScratchModel;

namespace {

const std::string kShard = "model-00001-of-000003.safetensors";
const std::string kExpert = "layers.1.block_sparse_moe.experts.0.w1";

}  // namespace

TEST_CASE("an MXFP4 scale tensor of the wrong shape", "[bad-input]") {
  ScratchModel m("k3_tiny_mxfp4");
  m.patch(kShard, kExpert + ".weight_scale\":{\"dtype\":\"U8\",\"shape\":[64,1]",
          kExpert + ".weight_scale\":{\"dtype\":\"U8\",\"shape\":[32,2]");
  expect_model_error(m, {kShard, kExpert + ".weight_scale'", "[32, 2]", "[64, 1]"});
}

TEST_CASE("an MXFP4 packed tensor of the wrong size", "[bad-input]") {
  ScratchModel m("k3_tiny_mxfp4");
  m.patch(kShard, kExpert + ".weight_packed\":{\"dtype\":\"U8\",\"shape\":[64,16]",
          kExpert + ".weight_packed\":{\"dtype\":\"U8\",\"shape\":[32,32]");
  expect_model_error(m, {kShard, kExpert + ".weight_packed'", "[32, 32]", "[64, 16]"});
}

TEST_CASE("a packed tensor of an unknown element type", "[bad-input]") {
  ScratchModel m("k3_tiny_mxfp4");
  m.patch(kShard, kExpert + ".weight_packed\":{\"dtype\":\"U8\"", kExpert + ".weight_packed\":{\"dtype\":\"I8\"");
  expect_model_error(m, {kExpert + ".weight_packed'", "I8", "not a known packed format"});
}

TEST_CASE("a NaN (0xFF) E8M0 scale byte is refused when the expert is read", "[bad-input]") {
  ScratchModel m("k3_tiny_mxfp4");
  // Every routed expert of layer 1 gets a NaN scale, so whichever the router picks is caught.
  const deltafin::SafetensorsHeader h = deltafin::read_safetensors_header((m.dir / kShard).string());
  std::string bytes = m.read(kShard);
  for (const deltafin::TensorInfo& t : h.tensors)
    if (t.name.find("layers.1.block_sparse_moe.experts.") != std::string::npos &&
        t.name.find(".weight_scale") != std::string::npos)
      bytes[t.offset] = '\xFF';
  m.write(kShard, bytes);
  expect_model_error(m, {kShard, "layers.1.block_sparse_moe.experts.", ".weight_scale'", "NaN"});
}

TEST_CASE("an unknown quantization format in config.json", "[bad-input]") {
  ScratchModel m("k3_tiny_mxfp4");
  m.patch_all("config.json", "mxfp4-pack-quantized", "nvfp4-pack-quantized");
  expect_model_error(m, {"config.json", "nvfp4-pack-quantized", "not supported"});
}

TEST_CASE("INT4 group-32: scales of the wrong type and a weight_shape that disagrees", "[bad-input]") {
  const std::string shard = "model-00001-of-000002.safetensors", expert = "layers.1.mlp.experts.3.up_proj";
  {
    ScratchModel m("k2_tiny_int4");
    m.patch(shard, expert + ".weight_scale\":{\"dtype\":\"BF16\"", expert + ".weight_scale\":{\"dtype\":\"F16\" ");
    expect_model_error(m, {shard, expert + ".weight_scale'", "F16", "needs BF16"});
  }
  {
    ScratchModel m("k2_tiny_int4");
    const deltafin::SafetensorsHeader h = deltafin::read_safetensors_header((m.dir / shard).string());
    std::string bytes = m.read(shard);
    for (const deltafin::TensorInfo& t : h.tensors)
      if (t.name == "model." + expert + ".weight_shape") bytes[t.offset] = 17;  // [16, 128] -> [17, 128]
    m.write(shard, bytes);
    expect_model_error(m, {shard, expert + ".weight_shape'", "[17, 128]", "[16, 128]"});
  }
}
