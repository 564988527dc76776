// What only the CUDA backend has (the parity harness, test_backend_ops.cpp, covers the ops on
// every backend): fences over an asynchronous stream, wrap() of host memory the device reads and
// writes, the expert slot pool's device mirror (refreshed at each use), expert pins held until
// the kernels that read them have completed, one-line errors, batch invariance at the kernels'
// tile and slab boundaries, router choices identical to the CPU's, and attention at K2/K3 sizes.
// Tagged [cuda]: without a device each case warns "no CUDA device" and CTest reports it skipped.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "cpu/k3_ops.hpp"
#include "cpu/matmul.hpp"
#include "cpu/mla_attention.hpp"
#include "cpu/vec_ops.hpp"
#include "backend_test_util.hpp"
#include "model/expert_driver.hpp"
#include "random_weights.hpp"
#include "util/error.hpp"

using namespace deltafin;
using deltafin::test::random_matrix;
using deltafin::test::TestMatrix;
using test::Device;
using test::nmse;
using test::random_floats;
using test::same_bits;

namespace {

// The CUDA backend, or nullptr after a warning where there is none.
std::unique_ptr<Backend> cuda_or_skip() {
  if (!cuda_device_present()) {
#ifdef DELTAFIN_HAS_CUDA
    WARN("no CUDA device on this machine: skipped");
#else
    WARN("no CUDA device in this build (configure with -DDELTAFIN_CUDA=ON): skipped");
#endif
    return nullptr;
  }
  return make_cuda_backend();
}

using Expert = std::array<TestMatrix, 3>;  // gate [width, in], up [width, in], down [in, width]

Expert random_expert(WeightFormat f, int64_t width, int64_t in, std::mt19937& rng) {
  return {random_matrix(f, width, in, rng), random_matrix(f, width, in, rng), random_matrix(f, in, width, rng)};
}

// The expert op by its definition, from the twins: per row, sum over its experts of
// weight * down(act(gate x, up x)).
std::vector<float> experts_ref(const std::vector<Expert>& experts, const std::vector<float>& x, const std::vector<int32_t>& ids,
                               const std::vector<float>& weights, int64_t n, int64_t k, int64_t in, int64_t width,
                               const GatedActivation& act) {
  std::vector<float> ref(n * in, 0.0f), gate(width), up(width), y(in);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const Expert& m = experts[ids[t * k + j]];
      cpu::matmul_rows_ref(m[0].view(), x.data() + t * in, in, 1, gate.data(), width, 0, width);
      cpu::matmul_rows_ref(m[1].view(), x.data() + t * in, in, 1, up.data(), width, 0, width);
      if (act.kind == GatedActivation::kSiLU) cpu::silu_mul_ref(gate.data(), up.data(), width);
      else cpu::situ_mul_ref(gate.data(), up.data(), width, act.beta, act.linear_beta);
      cpu::matmul_rows_ref(m[2].view(), gate.data(), width, 1, y.data(), in, 0, in);
      for (int64_t i = 0; i < in; ++i) ref[t * in + i] += weights[t * k + j] * y[i];
    }
  return ref;
}

// Experts in device buffers, of which the source can hold `slots` at once; each pin's release is
// counted, and the most pins held at an acquire recorded.
class CountedExperts final : public ExpertSource {
 public:
  CountedExperts(Device& on, const std::vector<Expert>& host, int64_t slots = 0)
      : slots(slots > 0 ? slots : static_cast<int64_t>(host.size())) {
    for (const Expert& e : host) device.push_back({on.weight(e[0]), on.weight(e[1]), on.weight(e[2])});
  }
  Resident acquire(int32_t expert) override {
    most_held = std::max(most_held, acquired - released.load());
    ++acquired;
    return {device[expert], std::shared_ptr<const void>(new int(expert), [this](const int* p) {
              ++released;
              delete p;
            })};
  }
  int64_t capacity() const override { return slots; }
  std::vector<std::array<Weight, 3>> device;
  int64_t slots;
  int acquired = 0, most_held = 0;
  std::atomic<int> released{0};
};

const GatedActivation kSiTU{GatedActivation::kSiTU, 4.0f, 25.0f};

}  // namespace

TEST_CASE("cuda backend: fences pass in order, and wait() returns after the work before them", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  CHECK(std::string(b->name()) == "cuda");
  CHECK(b->threads() == 1);
  Device on{*b, {}};
  std::mt19937 rng(21);
  const int64_t n = 64, cols = 3000;
  const auto a = random_floats(n * cols, rng);
  // The result lands in wrapped host memory, so the host sees it only through the fence.
  std::vector<float> host(n * cols, -1.0f);
  const auto wrapped = b->wrap(reinterpret_cast<std::byte*>(host.data()), host.size() * 4);
  const Tensor ta = on.tensor(n, cols, a), sum = on.tensor(n, cols), out = Tensor::of(*wrapped, n, cols);
  b->fill(sum, 0.0f);
  const Backend::Fence first = b->commit();
  for (int i = 0; i < 50; ++i) b->add(sum, ta, sum);
  b->copy(sum, out);
  const Backend::Fence second = b->commit();
  CHECK(second > first);
  b->wait(second);
  b->wait(first);  // passed with the later one
  std::vector<float> ref(n * cols, 0.0f);
  for (int i = 0; i < 50; ++i)
    for (size_t e = 0; e < ref.size(); ++e) ref[e] += a[e];
  CHECK(same_bits(host, ref));
  CHECK_THROWS_WITH(b->wait(second + 100), Catch::Contains("never committed"));
}

TEST_CASE("cuda backend: wrap() lets ops read and write host memory in place", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  std::mt19937 rng(22);
  const int64_t n = 5, rows = 70, cols = 256;
  const TestMatrix m = random_matrix(WeightFormat::BF16, rows, cols, rng);
  auto x = random_floats(n * cols, rng);
  std::vector<float> y(n * rows, 0.0f);
  auto bytes = [](const void* p) { return const_cast<std::byte*>(static_cast<const std::byte*>(p)); };
  const auto wx = b->wrap(bytes(x.data()), x.size() * 4), wy = b->wrap(bytes(y.data()), y.size() * 4);
  const auto ww = b->wrap(bytes(m.u16.data()), m.data_bytes());
  CHECK(wx->host() == bytes(x.data()));
  const Weight w{WeightFormat::BF16, rows, cols, ww.get(), 0, nullptr, 0};
  b->matmul(w, Tensor::of(*wx, n, cols), Tensor::of(*wy, n, rows));
  b->wait(b->commit());
  // The same product from device buffers, bit for bit.
  const Tensor y_dev = on.tensor(n, rows);
  b->matmul(on.weight(m), on.tensor(n, cols, x), y_dev);
  CHECK(same_bits(y, on.get(y_dev)));
  std::vector<float> ref(n * rows);
  cpu::matmul_rows_ref(m.view(), x.data(), cols, n, ref.data(), rows, 0, rows);
  CHECK(nmse(y, ref) < 1e-10);
  // The host rewrites the input; the next op sees it.
  for (float& v : x) v = -v;
  b->matmul(w, Tensor::of(*wx, n, cols), Tensor::of(*wy, n, rows));
  b->wait(b->commit());
  for (float& v : ref) v = -v;
  CHECK(nmse(y, ref) < 1e-10);
}

TEST_CASE("cuda backend: the slot pool is VRAM, filled by upload_slot from pinned staging, and a rewritten slot is seen at the next use", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  Scratch scratch(*b);
  std::mt19937 rng(23);
  const int64_t n = 3, k = 1, in = 128, width = 64;
  constexpr uint64_t kPart = 64 << 10;  // each matrix's data and scales at their own 64 KiB offset
  const auto slots = b->allocate_slots(6 * kPart);
  CHECK(slots->host() == nullptr);  // the expert store stages its reads
  const auto staging = b->allocate_host(6 * kPart);
  REQUIRE(staging->host() != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(staging->host()) % (2 << 20) == 0);
  // One expert: written into staging as the expert store's reads do, then uploaded part by part.
  auto place = [&](const Expert& e) {
    std::array<Weight, 3> w;
    for (int p = 0; p < 3; ++p) {
      const WeightView v = e[p].view();
      std::memcpy(staging->host() + 2 * p * kPart, v.data, e[p].data_bytes());
      std::memcpy(staging->host() + (2 * p + 1) * kPart, v.scales, e[p].scale_bytes());
      b->upload_slot(*staging, 2 * p * kPart, *slots, 2 * p * kPart, e[p].data_bytes());
      b->upload_slot(*staging, (2 * p + 1) * kPart, *slots, (2 * p + 1) * kPart, e[p].scale_bytes());
      w[p] = {v.format, v.rows, v.cols, slots.get(), 2 * p * kPart, slots.get(), (2 * p + 1) * kPart};
    }
    return w;
  };
  struct SlotExpert final : ExpertSource {
    std::array<Weight, 3> w;
    Resident acquire(int32_t) override { return {w, std::make_shared<int>(0)}; }
    int64_t capacity() const override { return 1; }
  } source;
  const auto x = random_floats(n * in, rng);
  const std::vector<int32_t> ids = {0, 0, 0}, chosen = {0};
  const std::vector<float> weights = {1.0f, 0.5f, -2.0f};
  const Tensor tx = on.tensor(n, in, x), tids = on.tensor(n, k, ids.data(), Elem::I32), tw = on.tensor(n, k, weights);
  std::vector<std::vector<float>> results;
  for (int use = 0; use < 2; ++use) {
    b->wait(b->commit());  // the store reuses a slot only once the kernels reading it have passed
    const std::vector<Expert> expert = {random_expert(WeightFormat::MXFP4, width, in, rng)};
    source.w = place(expert[0]);  // the second use: new bytes in the same slot
    const Tensor out = on.tensor(n, in);
    run_experts(*b, scratch, source, tx, tids, tw, chosen, width, kSiTU, out);
    results.push_back(on.get(out));
    CAPTURE(use);
    CHECK(nmse(results.back(), experts_ref(expert, x, ids, weights, n, k, in, width, kSiTU)) < 1e-10);
  }
  CHECK(!same_bits(results[0], results[1]));
}

TEST_CASE("cuda backend: expert pins are held until the kernels that read them have completed", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  Scratch scratch(*b);
  std::mt19937 rng(24);
  const int64_t n = 4, k = 2, in = 2048, width = 1024;
  std::vector<Expert> host;
  for (int e = 0; e < 4; ++e) host.push_back(random_expert(WeightFormat::INT4_G32, width, in, rng));
  CountedExperts source(on, host);
  const std::vector<int32_t> ids = {0, 1, 1, 2, 0, 3, 2, 3}, chosen = {0, 1, 2, 3};
  const std::vector<float> weights = {0.5f, 0.5f, 1.0f, -1.0f, 0.25f, 0.75f, 2.0f, 0.1f};
  const auto x = random_floats(n * in, rng);
  const Tensor out = on.tensor(n, in);
  run_experts(*b, scratch, source, on.tensor(n, in, x), on.tensor(n, k, ids.data(), Elem::I32), on.tensor(n, k, weights), chosen, width, kSiTU, out);
  CHECK(source.acquired == 4);
  CHECK(source.released == 0);  // the op's fence has not been seen to pass: every pin is held
  b->wait(b->commit());
  CHECK(source.released == 4);
  CHECK(nmse(on.get(out), experts_ref(host, x, ids, weights, n, k, in, width, kSiTU)) < 1e-10);
}

TEST_CASE("cuda backend: a source that holds fewer experts than the union gets at most capacity - 1 pins held", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  Scratch scratch(*b);
  std::mt19937 rng(29);
  const int64_t n = 6, k = 2, in = 512, width = 256;
  std::vector<Expert> host;
  for (int e = 0; e < 6; ++e) host.push_back(random_expert(WeightFormat::MXFP4, width, in, rng));
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 0, 5, 1, 4, 2, 3}, chosen = {0, 1, 2, 3, 4, 5};
  const std::vector<float> weights = {0.5f, 0.5f, 1.0f, -1.0f, 0.25f, 0.75f, 2.0f, 0.1f, 1.0f, 1.0f, -0.5f, 0.5f};
  const auto x = random_floats(n * in, rng);
  const Tensor tx = on.tensor(n, in, x), tids = on.tensor(n, k, ids.data(), Elem::I32), tw = on.tensor(n, k, weights);
  const auto ref = experts_ref(host, x, ids, weights, n, k, in, width, kSiTU);
  for (int64_t slots : {1, 2, 3}) {
    CountedExperts source(on, host, slots);
    const Tensor out = on.tensor(n, in);
    run_experts(*b, scratch, source, tx, tids, tw, chosen, width, kSiTU, out);
    CAPTURE(slots);
    CHECK(source.acquired == 6);
    CHECK(source.most_held <= slots - 1);
    CHECK(nmse(on.get(out), ref) < 1e-10);
    CHECK(source.released == 6);
  }
}

TEST_CASE("cuda backend: failures are one-line deltafin::Errors naming what failed", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  const uint64_t huge = uint64_t{1} << 50;
  try {
    b->allocate(huge);
    FAIL("a 1 PiB allocation succeeded");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find("1125899906842624 bytes") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK_THROWS_WITH(make_cuda_backend(9999), Catch::Contains("no CUDA device 9999"));
  auto cpu = make_cpu_backend(1);
  const auto foreign = cpu->allocate(64);
  CHECK_THROWS_WITH(b->fill(Tensor::of(*foreign, 4, 4), 1.0f), Catch::Contains("another backend"));
  Device on{*b, {}};
  const Tensor small = on.tensor(2, 8);
  CHECK_THROWS_WITH(b->add(small, small.col_range(0, 4), small), Catch::Contains("add of [2, 8] and [2, 4]"));
  // The backend is still usable after each of these.
  b->fill(small, 3.0f);
  CHECK(on.get(small) == std::vector<float>(16, 3.0f));
}

TEST_CASE("cuda backend: matmul and expert-op rows are batch invariant across tiles and slabs", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  Scratch scratch(*b);
  std::mt19937 rng(25);
  // 1120 columns: slabs of every format's chunks end part-way; 37 columns (not MXFP4): rows that
  // are not 16-byte aligned, read element by element.
  for (WeightFormat f : test::kFormats)
    for (int64_t cols : {int64_t{1120}, int64_t{37}}) {
      if (f == WeightFormat::MXFP4 && cols % 32 != 0) continue;
      const int64_t rows = 300, n = 19;  // two whole tiles of 8 and part of a third
      const TestMatrix m = random_matrix(f, rows, cols, rng);
      const Weight w = on.weight(m);
      const auto x = random_floats(n * cols, rng);
      const Tensor tx = on.tensor(n, cols, x), y = on.tensor(n, rows);
      b->matmul(w, tx, y);
      const std::vector<float> all = on.get(y);
      std::vector<float> one_by_one, ref(n * rows);
      for (int64_t t = 0; t < n; ++t) {
        const Tensor y1 = on.tensor(1, rows);
        b->matmul(w, tx.row_range(t, 1), y1);
        const auto row = on.get(y1);
        one_by_one.insert(one_by_one.end(), row.begin(), row.end());
      }
      cpu::matmul_rows_ref(m.view(), x.data(), cols, n, ref.data(), rows, 0, rows);
      CAPTURE(test::format_name(f), cols);
      CHECK(same_bits(all, one_by_one));
      CHECK(nmse(all, ref) < 1e-10);
    }
  // The expert op: 16 rows over 5 experts, against each row alone.
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::MXFP4}) {
    CAPTURE(test::format_name(f));
    const int64_t n = 16, k = 2, in = 256, width = 96;
    std::vector<Expert> host;
    for (int e = 0; e < 5; ++e) host.push_back(random_expert(f, width, in, rng));
    CountedExperts source(on, host);
    std::vector<int32_t> ids;
    std::vector<float> weights;
    for (int64_t t = 0; t < n; ++t) {
      const int32_t a = static_cast<int32_t>(t % 5), c = static_cast<int32_t>((t * 3 + 1) % 5);
      ids.push_back(std::min(a, c)), ids.push_back(a == c ? (a + 1) % 5 : std::max(a, c));
      if (ids[t * k] > ids[t * k + 1]) std::swap(ids[t * k], ids[t * k + 1]);
      weights.push_back(0.3f + 0.1f * t), weights.push_back(1.0f - 0.05f * t);
    }
    const std::vector<int32_t> all_experts = {0, 1, 2, 3, 4};
    const auto x = random_floats(n * in, rng);
    const Tensor tx = on.tensor(n, in, x), tids = on.tensor(n, k, ids.data(), Elem::I32), tw = on.tensor(n, k, weights);
    const Tensor out = on.tensor(n, in);
    run_experts(*b, scratch, source, tx, tids, tw, all_experts, width, GatedActivation{}, out);
    const std::vector<float> all = on.get(out);
    std::vector<float> one_by_one;
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<int32_t> mine = {ids[t * k], ids[t * k + 1]};
      const Tensor o = on.tensor(1, in);
      run_experts(*b, scratch, source, tx.row_range(t, 1), tids.row_range(t, 1), tw.row_range(t, 1), mine, width, GatedActivation{}, o);
      const auto row = on.get(o);
      one_by_one.insert(one_by_one.end(), row.begin(), row.end());
    }
    CHECK(same_bits(all, one_by_one));
    CHECK(nmse(all, experts_ref(host, x, ids, weights, n, k, in, width, GatedActivation{})) < 1e-10);
    CHECK(source.released == source.acquired);  // every download waited for everything
  }
}

namespace {

// A test matrix's elements, dequantized (exactly: an E2M1 code times a power of two is a float).
std::vector<float> dequantized(const TestMatrix& m) {
  std::vector<float> w(m.rows * m.cols);
  for (int64_t r = 0; r < m.rows; ++r) cpu::dequantize_row(m.view(), r, w.data() + r * m.cols);
  return w;
}

}  // namespace

TEST_CASE("cuda backend: MXFP4 experts are as close to the exact sums as the CPU's fp32 twin", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  Scratch scratch(*b);
  std::mt19937 rng(41);
  // 111 groups a row, 3 positions.
  const int64_t n = 3, k = 2, in = 3552, width = 192;
  std::vector<Expert> host;
  for (int e = 0; e < 3; ++e) host.push_back(random_expert(WeightFormat::MXFP4, width, in, rng));
  // x over 25 binades within each group, one zero group, one of subnormals.
  std::uniform_int_distribution<int> binade(-20, 4);
  std::vector<float> x = random_floats(n * in, rng);
  for (float& v : x) v = std::ldexp(v, binade(rng));
  for (int64_t c = 0; c < 32; ++c) x[64 + c] = 0.0f, x[in + 96 + c] = std::ldexp(x[in + 96 + c], -140);
  const std::vector<int32_t> ids = {0, 2, 1, 2, 0, 1};
  const std::vector<float> weights = {0.75f, 0.25f, 1.0f, -0.5f, 0.125f, 2.0f};
  const std::vector<int32_t> chosen = {0, 1, 2};
  const Tensor out = on.tensor(n, in);
  CountedExperts source(on, host);
  run_experts(*b, scratch, source, on.tensor(n, in, x), on.tensor(n, k, ids.data(), Elem::I32), on.tensor(n, k, weights), chosen, width, GatedActivation{}, out);
  const std::vector<float> got = on.get(out);
  // The definition in double (the activations rounded to float, as both backends hold them).
  std::vector<std::array<std::vector<float>, 3>> dense;
  for (const Expert& e : host) dense.push_back({dequantized(e[0]), dequantized(e[1]), dequantized(e[2])});
  std::vector<float> exact(n * in, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const std::vector<float>* m = dense[ids[t * k + j]].data();  // gate [width, in], up [width, in], down [in, width]
      std::vector<float> h(width);
      for (int64_t r = 0; r < width; ++r) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < in; ++c)
          g += double{m[0][r * in + c]} * x[t * in + c], u += double{m[1][r * in + c]} * x[t * in + c];
        h[r] = static_cast<float>(g / (1 + std::exp(-g)) * u);
      }
      for (int64_t r = 0; r < in; ++r) {
        double y = 0;
        for (int64_t c = 0; c < width; ++c) y += double{m[2][r * width + c]} * h[c];
        exact[t * in + r] += static_cast<float>(weights[t * k + j] * y);
      }
    }
  const double cuda_error = nmse(got, exact);
  const double cpu_error = nmse(experts_ref(host, x, ids, weights, n, k, in, width, GatedActivation{}), exact);
  WARN("MXFP4 experts against the exact sums: CUDA nmse " << cuda_error << ", CPU fp32 twin nmse " << cpu_error);
  CHECK(cuda_error < 1e-12);
  CHECK(cuda_error <= 4 * cpu_error);
}

TEST_CASE("cuda backend: an MXFP4 NaN scale or a non-finite x gives non-finite sums exactly where the CPU's are", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  Scratch scratch(*b);
  std::mt19937 rng(43);
  const int64_t in = 128, width = 64;
  for (const bool nan_scale : {true, false}) {
    std::vector<Expert> host = {random_expert(WeightFormat::MXFP4, width, in, rng)};
    std::vector<float> x = random_floats(2 * in, rng);
    if (nan_scale) host[0][0].scales_u8[5 * (in / 32) + 2] = 255;  // gate row 5, group 2
    else x[in + 70] = INFINITY;                                    // position 1, group 2
    const std::vector<int32_t> ids = {0, 0}, chosen = {0};
    const std::vector<float> weights = {1.0f, 1.0f};
    const Tensor out = on.tensor(2, in);
    CountedExperts source(on, host);
    run_experts(*b, scratch, source, on.tensor(2, in, x), on.tensor(2, 1, ids.data(), Elem::I32), on.tensor(2, 1, weights), chosen, width, GatedActivation{}, out);
    const std::vector<float> got = on.get(out);
    const std::vector<float> ref = experts_ref(host, x, ids, weights, 2, 1, in, width, GatedActivation{});
    CAPTURE(nan_scale);
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(std::isfinite(got[i]) == std::isfinite(ref[i]));
      if (std::isfinite(ref[i])) CHECK(std::abs(got[i] - ref[i]) <= 1e-4f * (1 + std::abs(ref[i])));
    }
  }
}

TEST_CASE("cuda backend: route chooses exactly the CPU's experts at K2 and grouped sizes", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  auto cpu = make_cpu_backend(2);
  std::mt19937 rng(26);
  for (const RouterSpec spec : {RouterSpec{384, 8, 1, 1, true, 2.827f}, RouterSpec{256, 8, 8, 4, true, 2.5f},
                                RouterSpec{64, 6, 1, 1, false, 1.0f}}) {
    const int64_t n = 64;
    auto logits = random_floats(n * spec.experts, rng, 2.0f);
    for (int64_t t = 0; t < n; t += 7) logits[t * spec.experts + 5] = logits[t * spec.experts + 9];  // exact ties
    auto bias = random_floats(spec.experts, rng, 0.1f);
    bias[5] = bias[9];
    std::vector<std::vector<int32_t>> got_ids;
    std::vector<std::vector<float>> got_weights;
    for (Backend* backend : {cpu.get(), b.get()}) {
      Device on{*backend, {}};
      const Tensor ids = on.tensor(n, spec.top_k, nullptr, Elem::I32), w = on.tensor(n, spec.top_k);
      backend->route(spec, on.tensor(n, spec.experts, logits), on.tensor(1, spec.experts, bias), ids, w);
      got_ids.emplace_back(n * spec.top_k);
      backend->download(ids, got_ids.back().data());
      got_weights.push_back(on.get(w));
    }
    CAPTURE(spec.experts, spec.top_k, spec.n_group);
    CHECK(got_ids[0] == got_ids[1]);
    for (size_t i = 0; i < got_weights[0].size(); ++i) CHECK(std::fabs(got_weights[0][i] - got_weights[1][i]) <= 1e-6f);
  }
}

TEST_CASE("cuda backend: MLA over several softmax tiles and a 128-dim KDA state against the twins", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  Device on{*b, {}};
  std::mt19937 rng(27);
  {  // K2's head shape; contexts of 301 to 303 positions: two tiles of the online softmax
    const MlaShape s{4, 128, 64, 128, 512, 0.07f};
    const int64_t n = 3, start = 300, ctx = start + n, qk = s.nope + s.rope;
    const TestMatrix kv_b = random_matrix(WeightFormat::BF16, s.heads * (s.nope + s.v), s.kv_lora, rng);
    const auto q = random_floats(n * s.heads * qk, rng), c = random_floats(ctx * s.kv_lora, rng, 0.2f);
    const auto pe = random_floats(ctx * s.rope, rng);
    const Weight w = on.weight(kv_b);
    const Tensor qt = on.tensor(n, s.heads * qk, q), cc = on.tensor(ctx, s.kv_lora, c), cp = on.tensor(ctx, s.rope, pe);
    const Tensor out = on.tensor(n, s.heads * s.v);
    b->mla_attention(s, w, qt, cc, cp, start, out);
    std::vector<float> ref(n * s.heads * s.v), one_by_one;
    for (int64_t t = 0; t < n; ++t) {
      cpu::mla_attention_ref(s, kv_b.view(), q.data() + t * s.heads * qk, c.data(), pe.data(), start + t + 1,
                             ref.data() + t * s.heads * s.v, 0, s.heads);
      const Tensor o = on.tensor(1, s.heads * s.v);
      b->mla_attention(s, w, qt.row_range(t, 1), cc, cp, start + t, o);
      const auto row = on.get(o);
      one_by_one.insert(one_by_one.end(), row.begin(), row.end());
    }
    const auto got = on.get(out);
    CHECK(nmse(got, ref) < 1e-10);
    CHECK(same_bits(got, one_by_one));
  }
  {  // KDA with head_dim 128: a 64 KiB state per block (the shared-memory opt-in)
    const int64_t n = 4, heads = 2, hd = 128, ch = heads * hd, taps = 4;
    const auto q = random_floats(n * ch, rng), k = random_floats(n * ch, rng), v = random_floats(n * ch, rng);
    const auto beta = random_floats(n * heads, rng), decay = random_floats(n * ch, rng);
    const auto cq = random_floats(ch * taps, rng, 0.5f), ck = random_floats(ch * taps, rng, 0.5f), cv = random_floats(ch * taps, rng, 0.5f);
    const auto dt = random_floats(ch, rng), rate = std::vector<float>{0.5f, 2.0f};
    const auto window0 = random_floats(3 * (taps - 1) * ch, rng), state0 = random_floats(ch * hd, rng, 0.1f);
    KdaArgs a;
    a.heads = heads, a.head_dim = hd, a.taps = taps, a.gate_lower_bound = -5.0f, a.norm_eps = 1e-6f;
    a.q = on.tensor(n, ch, q), a.k = on.tensor(n, ch, k), a.v = on.tensor(n, ch, v);
    a.beta = on.tensor(n, heads, beta), a.decay = on.tensor(n, ch, decay);
    a.conv_q = on.tensor(ch, taps, cq), a.conv_k = on.tensor(ch, taps, ck), a.conv_v = on.tensor(ch, taps, cv);
    a.dt_bias = on.tensor(1, ch, dt), a.decay_rate = on.tensor(1, heads, rate);
    a.window = on.tensor(3 * (taps - 1), ch, window0), a.state = on.tensor(ch, hd, state0), a.out = on.tensor(n, ch);
    b->kda(a);
    std::vector<float> rw = window0, rs = state0, qc(n * ch), kc(n * ch), vc(n * ch), rb = beta, rd = decay, ref(n * ch);
    cpu::short_conv_silu_ref(cq.data(), rw.data(), q.data(), n, ch, taps, qc.data());
    cpu::short_conv_silu_ref(ck.data(), rw.data() + (taps - 1) * ch, k.data(), n, ch, taps, kc.data());
    cpu::short_conv_silu_ref(cv.data(), rw.data() + 2 * (taps - 1) * ch, v.data(), n, ch, taps, vc.data());
    for (int64_t t = 0; t < n; ++t) {
      cpu::kda_prepare_ref(qc.data() + t * ch, kc.data() + t * ch, rb.data() + t * heads, rd.data() + t * ch, dt.data(),
                           rate.data(), heads, hd, a.gate_lower_bound, a.norm_eps);
      cpu::kda_step_ref(rs.data(), qc.data() + t * ch, kc.data() + t * ch, vc.data() + t * ch, rd.data() + t * ch,
                        rb.data() + t * heads, hd, hd, ref.data() + t * ch, 0, heads);
    }
    CHECK(nmse(on.get(a.out), ref) < 1e-10);
    CHECK(nmse(on.get(a.state), rs) < 1e-10);
    CHECK(same_bits(on.get(a.window), rw));
  }
}

TEST_CASE("cuda backend: copy within one row between overlapping views equals the CPU's", "[cuda]") {
  auto b = cuda_or_skip();
  if (!b) return;
  std::mt19937 rng(28);
  const auto v = random_floats(40, rng);
  auto cpu = make_cpu_backend(1);
  std::vector<std::vector<float>> results;
  for (Backend* backend : {cpu.get(), b.get()}) {
    Device on{*backend, {}};
    const Tensor t = on.tensor(1, 40, v);
    backend->copy(t.col_range(0, 30), t.col_range(7, 30));
    results.push_back(on.get(t));
  }
  CHECK(same_bits(results[0], results[1]));
}
