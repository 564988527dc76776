// The SIMT emulator of the Metal kernels (tests/metal): its semantics (real barriers, simd
// collectives in lane order, divergence reported), every kernel dispatched, and the routed
// experts read from one slot pool through few slots, against the reference twins by the parity
// harness's bound. The op-by-op parity runs in test_backend_ops.cpp, where the emulated Metal
// backend is one of the backends under test.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "backend/backend_check.hpp"
#include "backend_test_util.hpp"
#include "cpu/k3_ops.hpp"
#include "cpu/vec_ops.hpp"
#include "cpu/matmul.hpp"
#include "metal/emulated_kernels.hpp"
#include "metal/emulated_metal.hpp"
#include "metal/simt.hpp"
#include "model/expert_driver.hpp"
#include "random_weights.hpp"
#include "test_util.hpp"

namespace metal {  // as msl_compat.hpp declares them (defined in tests/metal/simt.cpp)
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
void threadgroup_barrier(mem_flags flags);
float simd_sum(float x);
int simd_shuffle_xor(int x, unsigned short mask);
}  // namespace metal

using namespace deltafin;
using deltafin::test::random_matrix;
using deltafin::test::TestMatrix;

namespace {

const uint32_t kOneGroup[3] = {1, 1, 1};

}  // namespace

TEST_CASE("metal emulator: threadgroup_barrier orders threadgroup memory between lanes", "[metal]") {
  std::vector<float> seen(128);
  simt::run("barrier", kOneGroup, 128, 128 * 4, [&](simt::Group, uint32_t lid, std::byte* tg) {
    float* shared = reinterpret_cast<float*>(tg);
    shared[lid] = float(lid);
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    seen[lid] = shared[(lid + 37) % 128];  // written by a lane of another simdgroup
  });
  for (uint32_t l = 0; l < 128; ++l) CHECK(seen[l] == float((l + 37) % 128));
}

TEST_CASE("metal emulator: threadgroup memory starts as NaN, so reads before writes show", "[metal]") {
  std::vector<float> seen(32);
  simt::run("uninitialised", kOneGroup, 32, 32 * 4, [&](simt::Group, uint32_t lid, std::byte* tg) {
    seen[lid] = reinterpret_cast<float*>(tg)[lid];
  });
  for (float v : seen) CHECK(std::isnan(v));
}

TEST_CASE("metal emulator: simd_sum adds lanes 0..31 in order, and shuffles read the named lane", "[metal]") {
  std::vector<float> sums(64);
  std::vector<int> partners(64);
  simt::run("simd", kOneGroup, 64, 16, [&](simt::Group, uint32_t lid, std::byte*) {
    const float v = lid % 32 == 0 ? 1e8f : 1.0f;  // in lane order each 1 is lost against 1e8
    sums[lid] = metal::simd_sum(v);
    partners[lid] = metal::simd_shuffle_xor(int(lid), 5);
  });
  float in_order = 0.0f;
  for (int l = 0; l < 32; ++l) in_order += l == 0 ? 1e8f : 1.0f;
  for (uint32_t l = 0; l < 64; ++l) {
    CHECK(sums[l] == in_order);
    CHECK(partners[l] == int(l ^ 5));
  }
}

TEST_CASE("metal emulator: a barrier not every lane reaches is reported, naming the kernel", "[metal]") {
  auto diverging = [](simt::Group, uint32_t lid, std::byte*) {
    if (lid < 32) metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  };
  CHECK_THROWS_WITH(simt::run("df_diverging", kOneGroup, 64, 16, diverging), Catch::Contains("df_diverging") && Catch::Contains("diverged"));
  auto partial_simd = [](simt::Group, uint32_t lid, std::byte*) {
    if (lid % 32 < 16) metal::simd_sum(1.0f);
  };
  CHECK_THROWS_WITH(simt::run("df_partial", kOneGroup, 32, 16, partial_simd), Catch::Contains("df_partial"));
  CHECK_THROWS_WITH(simt::run("df_odd", kOneGroup, 48, 16, partial_simd), Catch::Contains("multiple of 32"));
}

namespace {

// Experts in one slot pool, `capacity` slots of 2 MiB, each expert's projections at offsets that
// are element-aligned but not 16-byte aligned (the kernels' data_skip); acquire() copies the
// expert into a free slot and checks that the backend holds at most capacity - 1 pins.
class SlotPoolExperts final : public ExpertSource {
 public:
  static constexpr uint64_t kSlot = 2 << 20;
  SlotPoolExperts(Backend& backend, int64_t count, int64_t width, int64_t in, WeightFormat f, int64_t capacity, std::mt19937& rng)
      : backend_(backend), capacity_(capacity), pool_(backend.allocate_slots(kSlot * capacity)), pins_(capacity) {
    for (int64_t e = 0; e < count; ++e)
      host.push_back({random_matrix(f, width, in, rng), random_matrix(f, width, in, rng), random_matrix(f, in, width, rng)});
  }
  Resident acquire(int32_t expert) override {
    acquired.push_back(expert);
    int64_t live = 0, free_slot = -1;
    for (int64_t s = 0; s < capacity_; ++s) {
      if (!pins_[s].expired()) ++live;
      else if (free_slot < 0) free_slot = s;
    }
    CHECK(live <= capacity_ - 1);
    REQUIRE(free_slot >= 0);
    Resident r;
    uint64_t at = static_cast<uint64_t>(free_slot) * kSlot + 4;
    for (int p = 0; p < 3; ++p) {
      const TestMatrix& m = host[expert][p];
      const WeightView v = m.view();
      Weight& w = r.proj[p];
      w = {v.format, v.rows, v.cols, pool_.get(), at, nullptr, 0};
      backend_.upload(v.data, *pool_, at, m.data_bytes());
      at = (at + m.data_bytes() + 15) / 16 * 16 + 4;
      if (m.scale_bytes()) {
        w.scales = pool_.get(), w.scales_offset = at;
        backend_.upload(v.scales, *pool_, at, m.scale_bytes());
        at = (at + m.scale_bytes() + 15) / 16 * 16 + 4;
      }
    }
    REQUIRE(at <= static_cast<uint64_t>(free_slot + 1) * kSlot);
    auto pin = std::make_shared<int>(expert);
    pins_[free_slot] = pin;
    r.pin = pin;
    return r;
  }
  int64_t capacity() const override { return capacity_; }

  std::vector<std::array<TestMatrix, 3>> host;
  std::vector<int32_t> acquired;

 private:
  Backend& backend_;
  int64_t capacity_;
  std::unique_ptr<Buffer> pool_;
  std::vector<std::weak_ptr<int>> pins_;
};

}  // namespace

TEST_CASE("metal emulator: routed experts through a slot pool of three slots, odd shapes, against the twins", "[metal]") {
  const auto backend = test::make_emulated_metal_backend();
  test::Device d{*backend, {}};
  std::mt19937 rng(21);
  for (WeightFormat f : test::kFormats) {
    const int64_t n = 7, k = 3, in = 96, width = 33 + (f == WeightFormat::MXFP4 ? 31 : 0), experts = 9;  // MXFP4: width 64
    SlotPoolExperts source(*backend, experts, width, in, f, 3, rng);
    std::vector<int32_t> ids;
    std::set<int32_t> chosen_set;
    std::vector<float> weights;
    for (int64_t t = 0; t < n; ++t) {
      std::set<int32_t> row;
      while (static_cast<int64_t>(row.size()) < k) row.insert(static_cast<int32_t>(rng() % experts));
      for (int32_t e : row) ids.push_back(e), chosen_set.insert(e), weights.push_back(0.25f + 0.125f * float(rng() % 8));
    }
    const std::vector<int32_t> chosen(chosen_set.begin(), chosen_set.end());
    const auto x = test::random_floats(n * in, rng);
    const Tensor out = d.tensor(n, in);
    const GatedActivation act{GatedActivation::kSiLU};
    Scratch scratch(*backend);
    run_experts(*backend, scratch, source, d.tensor(n, in, x), d.tensor(n, k, ids.data(), Elem::I32), d.tensor(n, k, weights), chosen, width, act, out);
    CHECK(source.acquired == chosen);
    std::vector<float> ref(n * in, 0.0f), gate(width), up(width), y(in);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const auto& m = source.host[ids[t * k + j]];
        cpu::matmul_rows_ref(m[0].view(), x.data() + t * in, in, 1, gate.data(), width, 0, width);
        cpu::matmul_rows_ref(m[1].view(), x.data() + t * in, in, 1, up.data(), width, 0, width);
        cpu::silu_mul_ref(gate.data(), up.data(), width);
        cpu::matmul_rows_ref(m[2].view(), gate.data(), width, 1, y.data(), in, 0, in);
        for (int64_t i = 0; i < in; ++i) ref[t * in + i] += weights[t * k + j] * y[i];
      }
    CAPTURE(test::format_name(f));
    CHECK(test::nmse(d.get(out), ref) < 1e-10);  // the parity harness's bound for routed_experts
  }
}

TEST_CASE("metal emulator: the parity harness's ops dispatch every kernel of kernels/metal", "[metal]") {
  const auto backend = test::make_emulated_metal_backend();
  test::Device d{*backend, {}};
  std::mt19937 rng(22);
  const int64_t n = 3, cols = 64;
  const Tensor x = d.tensor(n, cols, test::random_floats(n * cols, rng)), y = d.tensor(n, cols), w1 = d.tensor(1, cols, test::random_floats(cols, rng));
  const TestMatrix m = random_matrix(WeightFormat::BF16, 40, cols, rng);
  const std::vector<int32_t> tokens = {1, 7, 39};
  backend->fill(y, 1.0f);
  backend->copy(x.col_range(0, 10), x.col_range(5, 10));  // overlapping: through a scratch copy
  backend->add(x, y, y);
  backend->rmsnorm(x, w1, 1e-6f, y);
  backend->embed(d.weight(m), d.tensor(n, 1, tokens.data(), Elem::I32), y);
  backend->matmul(d.weight(random_matrix(WeightFormat::F32, 8, cols, rng)), x, d.tensor(n, 8));
  backend->rope(x, 2, 32, 0, d.tensor(1, 4, std::vector<float>{1.0f, 0.5f, 0.25f, 0.125f}), 1.0f, 3);
  const Tensor candidates[2] = {x, y};
  backend->attn_res_mix(candidates, w1, 1e-6f, d.tensor(n, cols));
  const RouterSpec spec{16, 2, 4, 2, true, 1.0f};
  backend->route(spec, d.tensor(n, 16, test::random_floats(n * 16, rng)), Tensor{}, d.tensor(n, 2, nullptr, Elem::I32), d.tensor(n, 2));
  const MlaShape s{2, 4, 4, 4, 8, 0.5f};
  backend->mla_attention(s, d.weight(random_matrix(WeightFormat::BF16, s.heads * (s.nope + s.v), s.kv_lora, rng)),
                         d.tensor(1, s.heads * (s.nope + s.rope), test::random_floats(16, rng)),
                         d.tensor(4, s.kv_lora, test::random_floats(32, rng)), d.tensor(4, s.rope, test::random_floats(16, rng)), 3,
                         d.tensor(1, s.heads * s.v));
  KdaArgs a;
  a.heads = 1, a.head_dim = 8, a.taps = 2, a.gate_lower_bound = -5.0f, a.norm_eps = 1e-6f;
  a.q = d.tensor(1, 8, test::random_floats(8, rng)), a.k = d.tensor(1, 8, test::random_floats(8, rng)), a.v = d.tensor(1, 8, test::random_floats(8, rng));
  a.beta = d.tensor(1, 1, test::random_floats(1, rng)), a.decay = d.tensor(1, 8, test::random_floats(8, rng));
  a.conv_q = a.conv_k = a.conv_v = d.tensor(8, 2, test::random_floats(16, rng));
  a.dt_bias = d.tensor(1, 8, test::random_floats(8, rng)), a.decay_rate = d.tensor(1, 1, std::vector<float>{1.0f});
  a.window = d.tensor(3, 8, test::random_floats(24, rng)), a.state = d.tensor(8, 8, test::random_floats(64, rng)), a.out = d.tensor(1, 8);
  backend->kda(a);
  backend->mul_sigmoid(x, y, y);
  backend->gated(GatedActivation{GatedActivation::kSiLU}, x, y, y);
  SlotPoolExperts source(*backend, 2, 32, cols, WeightFormat::F16, 2, rng);
  const std::vector<int32_t> ids = {0, 1, 1, 0, 0, 1};
  Scratch scratch(*backend);
  run_experts(*backend, scratch, source, x, d.tensor(n, 2, ids.data(), Elem::I32), d.tensor(n, 2, std::vector<float>(6, 0.5f)), std::vector<int32_t>{0, 1}, 32, GatedActivation{GatedActivation::kSiLU}, d.tensor(n, cols));
  backend->wait(backend->commit());
  for (const std::string& kernel : simt::emulated_kernel_names()) {
    CAPTURE(kernel);
    CHECK(test::emulated_dispatch_counts().count(kernel) == 1);
  }
  // ... and the emulator has every kernel the sources define.
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(test::fixtures_dir()).parent_path().parent_path() / "kernels" / "metal";
  std::set<std::string> defined;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".metal") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const std::regex kernel(R"(kernel\s+void\s+(\w+))");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kernel); it != std::sregex_iterator(); ++it) defined.insert((*it)[1]);
  }
  const auto names = simt::emulated_kernel_names();
  CHECK(defined == std::set<std::string>(names.begin(), names.end()));
  CHECK(defined.size() >= 14);
}

namespace deltafin {
extern const char kMetalSource[];  // cmake/metal_embed.cmake
}

TEST_CASE("metal: the embedded source holds every kernel once, headers inlined, no includes of files", "[metal]") {
  const std::string source = kMetalSource;
  for (const std::string& kernel : simt::emulated_kernel_names()) {
    CAPTURE(kernel);
    const std::string needle = "kernel void " + kernel + "(";
    CHECK(source.find(needle) != std::string::npos);
    CHECK(source.find(needle) == source.rfind(needle));
  }
  CHECK(source.find("#include \"") == std::string::npos);
  CHECK(source.find("struct MatmulArgs") != std::string::npos);
}

TEST_CASE("metal-selftest's op checks pass on the emulated Metal backend against the CPU", "[metal]") {
  const auto device = test::make_emulated_metal_backend();
  const auto cpu = make_cpu_backend(2);
  const std::vector<OpCheck> checks = check_ops(*device, *cpu);
  CHECK(checks.size() == 25);
  for (const OpCheck& c : checks) {
    CAPTURE(c.op, c.nmse, c.bound);
    CHECK(c.pass());
  }
}

TEST_CASE("deltafin metal-selftest: a build without Metal says so in one line and exits 1", "[metal]") {
  if (metal_device_present()) return;  // a Mac runs the real thing (scripts/test.sh does not)
  const auto r = test::run_deltafin("metal-selftest --json /dev/null");
  CHECK(r.exit_code == 1);
  CHECK(r.output == "deltafin: metal-selftest: this build has no Metal backend (it is built on macOS for Apple Silicon)\n");
}

// Shapes past one tile of each kernel, against the CPU backend (itself within the harness's
// bounds of the twins): MLA over three softmax tiles, a 128-dim KDA state (four simdgroups in each
// reduction), the router at Kimi K2's and DeepSeek-V3's sizes, and matmul rows that span tiles.
TEST_CASE("metal emulator: MLA over several softmax tiles, a 128-dim KDA state, K2-sized routing, against the CPU", "[metal]") {
  const auto metal = test::make_emulated_metal_backend();
  const auto cpu = make_cpu_backend(2);
  std::mt19937 rng(23);
  {
    const MlaShape s{2, 16, 8, 16, 64, 0.2f};
    const int64_t n = 3, start = 300, ctx = start + n;
    const TestMatrix kv_b = random_matrix(WeightFormat::BF16, s.heads * (s.nope + s.v), s.kv_lora, rng);
    const auto q = test::random_floats(n * s.heads * (s.nope + s.rope), rng), c = test::random_floats(ctx * s.kv_lora, rng);
    const auto pe = test::random_floats(ctx * s.rope, rng);
    std::vector<std::vector<float>> outs;
    for (Backend* b : {metal.get(), cpu.get()}) {
      test::Device d{*b, {}};
      const Tensor out = d.tensor(n, s.heads * s.v);
      b->mla_attention(s, d.weight(kv_b), d.tensor(n, s.heads * (s.nope + s.rope), q), d.tensor(ctx, s.kv_lora, c),
                       d.tensor(ctx, s.rope, pe), start, out);
      outs.push_back(d.get(out));
    }
    CHECK(test::nmse(outs[0], outs[1]) < 1e-10);
  }
  {
    const int64_t n = 3, heads = 2, hd = 128, ch = heads * hd, taps = 4;
    const auto q = test::random_floats(n * ch, rng), k = test::random_floats(n * ch, rng), v = test::random_floats(n * ch, rng);
    const auto beta = test::random_floats(n * heads, rng), decay = test::random_floats(n * ch, rng);
    const auto conv = test::random_floats(ch * taps, rng, 0.5f), dt = test::random_floats(ch, rng);
    const auto window = test::random_floats(3 * (taps - 1) * ch, rng), state = test::random_floats(ch * hd, rng, 0.1f);
    std::vector<std::vector<float>> outs;
    for (Backend* b : {metal.get(), cpu.get()}) {
      test::Device d{*b, {}};
      KdaArgs a;
      a.heads = heads, a.head_dim = hd, a.taps = taps, a.gate_lower_bound = -5.0f, a.norm_eps = 1e-6f;
      a.q = d.tensor(n, ch, q), a.k = d.tensor(n, ch, k), a.v = d.tensor(n, ch, v), a.beta = d.tensor(n, heads, beta);
      a.decay = d.tensor(n, ch, decay), a.conv_q = a.conv_k = a.conv_v = d.tensor(ch, taps, conv);
      a.dt_bias = d.tensor(1, ch, dt), a.decay_rate = d.tensor(1, heads, std::vector<float>{0.5f, 2.0f});
      a.window = d.tensor(3 * (taps - 1), ch, window), a.state = d.tensor(ch, hd, state), a.out = d.tensor(n, ch);
      b->kda(a);
      std::vector<float> o = d.get(a.out), s = d.get(a.state);
      o.insert(o.end(), s.begin(), s.end());
      outs.push_back(o);
    }
    CHECK(test::nmse(outs[0], outs[1]) < 1e-10);
  }
  for (const RouterSpec spec : {RouterSpec{384, 8, 1, 1, true, 2.827f}, RouterSpec{256, 8, 8, 4, true, 2.5f}}) {
    const int64_t n = 9;
    const auto logits = test::random_floats(n * spec.experts, rng, 2.0f), bias = test::random_floats(spec.experts, rng, 0.1f);
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::vector<float>> weights;
    for (Backend* b : {metal.get(), cpu.get()}) {
      test::Device d{*b, {}};
      const Tensor i = d.tensor(n, spec.top_k, nullptr, Elem::I32), w = d.tensor(n, spec.top_k);
      b->route(spec, d.tensor(n, spec.experts, logits), d.tensor(1, spec.experts, bias), i, w);
      ids.emplace_back(n * spec.top_k);
      b->download(i, ids.back().data());
      weights.push_back(d.get(w));
    }
    CAPTURE(spec.experts, spec.n_group);
    CHECK(ids[0] == ids[1]);
    CHECK(test::nmse(weights[0], weights[1]) < 1e-12);
  }
  {  // matmul: a row of a 9-row call equals the one-row call, bit for bit, across row tiles
    test::Device d{*metal, {}};
    const TestMatrix m = random_matrix(WeightFormat::MXFP4, 77, 96, rng);
    const auto x = test::random_floats(9 * 96, rng);
    const Weight w = d.weight(m);
    const Tensor all = d.tensor(9, 77), xs = d.tensor(9, 96, x);
    metal->matmul(w, xs, all);
    const auto batch = d.get(all);
    for (int64_t t = 0; t < 9; ++t) {
      const Tensor one = d.tensor(1, 77);
      metal->matmul(w, xs.row_range(t, 1), one);
      CHECK(test::same_bits(d.get(one), std::vector<float>(batch.begin() + t * 77, batch.begin() + (t + 1) * 77)));
    }
  }
}
