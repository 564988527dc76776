// Non-finite values (issue 12, item 5): a NaN or Inf in a spine tensor, an expert, a config
// scalar, or produced by the arithmetic, ends in one line naming what holds it and exit 1, never
// in NaN logits sampled as token 0 with exit 0.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>
#include <string>

#include "test_util.hpp"
#include "weights/finite_check.hpp"
#include "weights/safetensors.hpp"

using deltafin::test::expect_model_error;
using deltafin::test::ScratchModel;

namespace {

const std::string kShard = "model.safetensors";  // dsv3_tiny: one shard, F32 spine

// Overwrites elements [index, index + count) of the F32 tensor `name` with the float bits `bits`.
void poke_f32(const ScratchModel& m, const std::string& name, int64_t index, uint32_t bits, int64_t count = 1) {
  const deltafin::SafetensorsHeader h = deltafin::read_safetensors_header((m.dir / kShard).string());
  std::string bytes = m.read(kShard);
  for (const deltafin::TensorInfo& t : h.tensors) {
    if (t.name != name) continue;
    REQUIRE(t.dtype == deltafin::DType::F32);
    for (int64_t i = index; i < index + count; ++i) std::memcpy(&bytes[t.offset + 4 * i], &bits, 4);
    m.write(kShard, bytes);
    return;
  }
  FAIL("no tensor " << name);
}

constexpr uint32_t kNaN = 0x7fc00000u, kInf = 0x7f800000u;

}  // namespace

TEST_CASE("a NaN in the final norm is refused at load, naming the tensor", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  poke_f32(m, "model.norm.weight", 5, kNaN);
  expect_model_error(m, {"tensor 'model.norm.weight'", "element 5", "NaN or Inf"});
}

TEST_CASE("an Inf in lm_head is refused at load, naming the tensor and element", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  poke_f32(m, "lm_head.weight", 64 * 3 + 7, kInf);
  expect_model_error(m, {"tensor 'lm_head.weight'", "[3, 7]", "NaN or Inf"});
}

TEST_CASE("a NaN router correction bias is refused at load", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  poke_f32(m, "model.layers.2.mlp.gate.e_score_correction_bias", 0, kNaN);
  expect_model_error(m, {"tensor 'model.layers.2.mlp.gate.e_score_correction_bias'", "NaN or Inf"});
}

TEST_CASE("config scalars outside the float range are refused", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.set_config("routed_scaling_factor", "1e308");
  expect_model_error(m, {"config.json", "routed_scaling_factor", "outside the float range"});
}

TEST_CASE("activations that overflow give one line about non-finite logits", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  // A finite but huge lm_head (1.7e38 everywhere): the logits' dot products overflow.
  poke_f32(m, "lm_head.weight", 0, 0x7f000000u, 288 * 64);
  expect_model_error(m, {"non-finite logit"});
}

TEST_CASE("find_non_finite finds the first NaN or Inf of every stored format", "[bad-input]") {
  using deltafin::WeightFormat;
  using deltafin::WeightView;
  const int64_t rows = 130, cols = 256;  // fp8: two 128-row scale blocks, two scale columns
  std::vector<uint16_t> u16(rows * cols, 0x3c00);
  std::vector<uint32_t> u32(rows * cols, 0x3f800000u);
  std::vector<uint8_t> fp8(rows * cols, 0x38), nibbles(rows * cols / 2, 0x77), e8m0(rows * cols / 32, 127);
  std::vector<float> fp8_scales(2 * 2, 1.0f);
  std::vector<uint16_t> int4_scales(rows * cols / 32, 0x3c00);
  const auto at = [](const WeightView& w) { const auto b = deltafin::find_non_finite(w); return b ? b->index : -1; };
  const auto scale_at = [](const WeightView& w) { const auto b = deltafin::find_non_finite(w); return b && b->in_scales ? b->index : -1; };

  CHECK(at(WeightView{WeightFormat::BF16, u16.data(), rows, cols, nullptr}) == -1);
  u16[5000] = 0xff80, u16[9000] = 0x7fc1;  // -inf, NaN
  CHECK(at(WeightView{WeightFormat::BF16, u16.data(), rows, cols, nullptr}) == 5000);
  std::fill(u16.begin(), u16.end(), 0x3c00);
  u16[7777] = 0x7c00;  // f16 +inf (a finite bf16)
  CHECK(at(WeightView{WeightFormat::F16, u16.data(), rows, cols, nullptr}) == 7777);
  CHECK(at(WeightView{WeightFormat::BF16, u16.data(), rows, cols, nullptr}) == -1);
  u32[rows * cols - 1] = 0x7f800001u;
  CHECK(at(WeightView{WeightFormat::F32, u32.data(), rows, cols, nullptr}) == rows * cols - 1);

  // fp8: 300 NaN codes in one 4096-element block (more than a byte counter holds), then a NaN scale.
  const WeightView f8{WeightFormat::F8_E4M3_BLOCK128, fp8.data(), rows, cols, fp8_scales.data()};
  CHECK(at(f8) == -1);
  for (int i = 0; i < 300; ++i) fp8[8192 + 2 * i] = (i % 2) ? 0xff : 0x7f;
  CHECK(at(f8) == 8192);
  std::fill(fp8.begin(), fp8.end(), 0x38);
  fp8_scales[3] = std::numeric_limits<float>::infinity();
  CHECK(scale_at(f8) == 3);

  const WeightView mx{WeightFormat::MXFP4, nibbles.data(), rows, cols, e8m0.data()};
  CHECK(at(mx) == -1);
  e8m0[100] = 0xff;
  CHECK(scale_at(mx) == 100);
  const WeightView i4{WeightFormat::INT4_G32, nibbles.data(), rows, cols, int4_scales.data()};
  CHECK(at(i4) == -1);
  int4_scales[42] = 0x7fc0;
  CHECK(scale_at(i4) == 42);
}

TEST_CASE("a config.json key given twice is refused (Python would take the last value, this reader the first)", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  std::string config = m.read("config.json");
  const size_t brace = config.find('{');
  config.insert(brace + 1, "\"num_hidden_layers\": 99,");
  m.write("config.json", config);
  expect_model_error(m, {"config.json", "field 'num_hidden_layers' appears twice"});
}
