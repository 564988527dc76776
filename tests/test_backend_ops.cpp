// The backend parity harness: every op of the backend interface, on every compiled backend and
// every SIMD target, against its reference twin (the kernels' *_ref functions, double precision,
// textbook form) on random data and odd shapes, with a normalised-error bound per op written
// next to it; and each op's batch invariance (an n-row call equals n one-row calls, bit for bit).
// Data reaches a backend only through upload() and leaves it through download(), so the same
// harness serves device backends.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "cpu/k3_ops.hpp"
#include "cpu/matmul.hpp"
#include "cpu/mla_attention.hpp"
#include "cpu/rope.hpp"
#include "cpu/vec_ops.hpp"
#include "backend_test_util.hpp"
#include "metal/emulated_metal.hpp"
#include "model/expert_driver.hpp"
#include "random_weights.hpp"
#include "test_util.hpp"

using namespace deltafin;
using deltafin::test::random_matrix;
using deltafin::test::TestMatrix;
using test::Device;
using test::nmse;
using test::random_floats;
using test::same_bits;

namespace {

// Every backend this build has, for the harness: the CPU, CUDA or Metal where the build has it
// and a device is present, and the Metal kernels on the SIMT emulator (tests/metal); the last two
// once, as they do not depend on the host's SIMD target.
std::vector<std::unique_ptr<Backend>> backends_under_test(bool first_target) {
  std::vector<std::unique_ptr<Backend>> b;
  b.push_back(make_cpu_backend(3));
  if (cuda_device_present()) b.push_back(make_cuda_backend());
  if (first_target && metal_device_present()) b.push_back(make_metal_backend());
  if (first_target) b.push_back(test::make_emulated_metal_backend());
  return b;
}

template <class Body>
void for_each_backend(Body&& body) {
  bool first = true;
  test::for_each_simd_target([&](const std::string&) {
    for (auto& backend : backends_under_test(std::exchange(first, false))) {
      INFO("backend " << backend->name());
      Device d{*backend, {}};
      body(d);
    }
  });
}

}  // namespace

TEST_CASE("backend op matmul: every format and odd shapes against matmul_rows_ref", "[backend-ops]") {
  static constexpr double kBound = 1e-10;  // fp32 sums of exact products against double
  for_each_backend([](Device& d) {
    std::mt19937 rng(1);
    for (WeightFormat f : test::kFormats)
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {7, 64}, {129, 96}, {33, 160}}) {
        const TestMatrix m = random_matrix(f, rows, cols, rng);
        for (int64_t n : {1, 3, 9}) {
          const auto x = random_floats(n * cols, rng);
          const Tensor y = d.tensor(n, rows);
          d.backend.matmul(d.weight(m), d.tensor(n, cols, x), y);
          std::vector<float> ref(n * rows);
          cpu::matmul_rows_ref(m.view(), x.data(), cols, n, ref.data(), rows, 0, rows);
          CAPTURE(test::format_name(f), rows, cols, n);
          CHECK(nmse(d.get(y), ref) < kBound);
        }
      }
  });
}

TEST_CASE("backend op embed: rows of the table, dequantized exactly", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(2);
    for (WeightFormat f : test::kFormats) {
      const TestMatrix m = random_matrix(f, 40, 64, rng);
      const std::vector<int32_t> ids = {3, 0, 39, 3, 17};
      const Tensor out = d.tensor(5, 64);
      d.backend.embed(d.weight(m), d.tensor(5, 1, ids.data(), Elem::I32), out);
      std::vector<float> ref;
      for (int32_t id : ids)
        for (int64_t k = 0; k < 64; ++k) ref.push_back(cpu::weight_element_ref(m.view(), id, k));
      CAPTURE(test::format_name(f));
      CHECK(same_bits(d.get(out), ref));  // bound: exact (a decode, no arithmetic)
    }
  });
}

TEST_CASE("backend ops rmsnorm, add, mul_sigmoid, gated: against their twins, strided views included", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(3);
    const int64_t n = 5, cols = 37, wide = 50;  // a column range [3, 40) of [n, 50] rows
    const auto xs = random_floats(n * wide, rng, 3.0f), gs = random_floats(n * wide, rng, 3.0f);
    const auto w = random_floats(cols, rng);
    const Tensor x = d.tensor(n, wide, xs).col_range(3, cols), g = d.tensor(n, wide, gs).col_range(3, cols);
    auto host = [&](const std::vector<float>& v) {
      std::vector<float> out;
      for (int64_t t = 0; t < n; ++t) out.insert(out.end(), v.begin() + t * wide + 3, v.begin() + t * wide + 3 + cols);
      return out;
    };
    const std::vector<float> hx = host(xs), hg = host(gs);
    {  // rmsnorm: fp32 sum of squares against double (measured 1.4e-15)
      const Tensor out = d.tensor(n, cols);
      d.backend.rmsnorm(x, d.tensor(1, cols, w), 1e-6f, out);
      std::vector<float> ref(n * cols);
      for (int64_t t = 0; t < n; ++t) cpu::rmsnorm_ref(hx.data() + t * cols, w.data(), cols, 1e-6f, ref.data() + t * cols);
      CHECK(nmse(d.get(out), ref) < 1e-12);
    }
    {  // add: exact
      const Tensor out = d.tensor(n, cols);
      d.backend.add(x, g, out);
      std::vector<float> ref(n * cols);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = hx[i] + hg[i];
      CHECK(same_bits(d.get(out), ref));
    }
    {  // mul_sigmoid: one exp in fp32 (measured 2.6e-15)
      const Tensor out = d.tensor(n, cols);
      d.backend.mul_sigmoid(x, g, out);
      std::vector<float> ref(n * cols);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = static_cast<float>(hx[i] / (1.0 + std::exp(-double(hg[i]))));
      CHECK(nmse(d.get(out), ref) < 1e-12);
    }
    for (const GatedActivation act : {GatedActivation{GatedActivation::kSiLU}, GatedActivation{GatedActivation::kSiTU, 4.0f, 25.0f},
                                      GatedActivation{GatedActivation::kSiTU, 4.0f, 0.0f}}) {  // tanh, exp in fp32 (measured 1.1e-14)
      const Tensor out = d.tensor(n, cols);
      d.backend.gated(act, x, g, out);
      std::vector<float> ref = hx;
      if (act.kind == GatedActivation::kSiLU) cpu::silu_mul_ref(ref.data(), hg.data(), n * cols);
      else cpu::situ_mul_ref(ref.data(), hg.data(), n * cols, act.beta, act.linear_beta);
      CAPTURE(int(act.kind), act.linear_beta);
      CHECK(nmse(d.get(out), ref) < 1e-12);
    }
  });
}

TEST_CASE("backend op rope: interleaved pairs of every head against rope_interleaved_ref", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(4);
    const int64_t n = 6, heads = 3, head_dim = 24, offset = 8, rope = 16, start = 1000;
    std::vector<float> freq(rope / 2);
    for (int64_t i = 0; i < rope / 2; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / rope);
    const auto xs = random_floats(n * heads * head_dim, rng);
    const Tensor x = d.tensor(n, heads * head_dim, xs);
    d.backend.rope(x, heads, head_dim, offset, d.tensor(1, rope / 2, freq), 1.2f, start);
    std::vector<float> ref = xs;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h)
        cpu::rope_interleaved_ref(ref.data() + (t * heads + h) * head_dim + offset, freq.data(), rope / 2, 1.2f, start + t);
    CHECK(nmse(d.get(x), ref) < 1e-12);  // fp32 rotation of double cos/sin (measured 2.4e-15)
  });
}

TEST_CASE("backend op mla_attention: n causal queries against mla_attention_ref, and batch invariant", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(5);
    const MlaShape s{3, 8, 4, 8, 16, 0.3f};
    const int64_t n = 5, start = 7, ctx = start + n, qk = s.nope + s.rope;
    const TestMatrix kv_b = random_matrix(WeightFormat::BF16, s.heads * (s.nope + s.v), s.kv_lora, rng);
    const auto q = random_floats(n * s.heads * qk, rng), c = random_floats(ctx * s.kv_lora, rng), pe = random_floats(ctx * s.rope, rng);
    const Weight w = d.weight(kv_b);
    const Tensor cache_c = d.tensor(ctx, s.kv_lora, c), cache_pe = d.tensor(ctx, s.rope, pe), qt = d.tensor(n, s.heads * qk, q);
    const Tensor out = d.tensor(n, s.heads * s.v);
    d.backend.mla_attention(s, w, qt, cache_c, cache_pe, start, out);
    std::vector<float> ref(n * s.heads * s.v);
    for (int64_t t = 0; t < n; ++t)
      cpu::mla_attention_ref(s, kv_b.view(), q.data() + t * s.heads * qk, c.data(), pe.data(), start + t + 1,
                             ref.data() + t * s.heads * s.v, 0, s.heads);
    CHECK(nmse(d.get(out), ref) < 1e-10);  // absorbed fp32 against the textbook double form (measured 6.3e-14)
    std::vector<float> one_by_one;
    for (int64_t t = 0; t < n; ++t) {
      const Tensor o = d.tensor(1, s.heads * s.v);
      d.backend.mla_attention(s, w, qt.row_range(t, 1), cache_c, cache_pe, start + t, o);
      const auto row = d.get(o);
      one_by_one.insert(one_by_one.end(), row.begin(), row.end());
    }
    CHECK(same_bits(d.get(out), one_by_one));
  });
}

TEST_CASE("backend op kda: n tokens in one op against the twins' composition, and batch invariant", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(6);
    const int64_t n = 5, heads = 2, hd = 8, ch = heads * hd, taps = 4;
    const float lower = -5.0f, eps = 1e-6f;
    const auto q = random_floats(n * ch, rng), k = random_floats(n * ch, rng), v = random_floats(n * ch, rng);
    const auto beta = random_floats(n * heads, rng), decay = random_floats(n * ch, rng);
    const auto cq = random_floats(ch * taps, rng, 0.5f), ck = random_floats(ch * taps, rng, 0.5f), cv = random_floats(ch * taps, rng, 0.5f);
    const auto dt = random_floats(ch, rng), rate = std::vector<float>{0.5f, 2.0f};
    const auto window0 = random_floats(3 * (taps - 1) * ch, rng), state0 = random_floats(ch * hd, rng, 0.1f);
    auto run = [&](int64_t first, int64_t count, const Tensor& window, const Tensor& state) {
      KdaArgs a;
      a.heads = heads, a.head_dim = hd, a.taps = taps, a.gate_lower_bound = lower, a.norm_eps = eps;
      auto rows = [&](const std::vector<float>& x, int64_t cols) {
        return d.tensor(count, cols, std::vector<float>(x.begin() + first * cols, x.begin() + (first + count) * cols));
      };
      a.q = rows(q, ch), a.k = rows(k, ch), a.v = rows(v, ch), a.beta = rows(beta, heads), a.decay = rows(decay, ch);
      a.conv_q = d.tensor(ch, taps, cq), a.conv_k = d.tensor(ch, taps, ck), a.conv_v = d.tensor(ch, taps, cv);
      a.dt_bias = d.tensor(1, ch, dt), a.decay_rate = d.tensor(1, heads, rate);
      a.window = window, a.state = state, a.out = d.tensor(count, ch);
      d.backend.kda(a);
      return d.get(a.out);
    };
    const Tensor window = d.tensor(3 * (taps - 1), ch, window0), state = d.tensor(ch, hd, state0);
    const std::vector<float> out = run(0, n, window, state);
    // The reference: the double-precision twins in the op's order.
    std::vector<float> rw = window0, rs = state0, qc(n * ch), kc(n * ch), vc(n * ch), rb = beta, rd = decay, ref(n * ch);
    cpu::short_conv_silu_ref(cq.data(), rw.data(), q.data(), n, ch, taps, qc.data());
    cpu::short_conv_silu_ref(ck.data(), rw.data() + (taps - 1) * ch, k.data(), n, ch, taps, kc.data());
    cpu::short_conv_silu_ref(cv.data(), rw.data() + 2 * (taps - 1) * ch, v.data(), n, ch, taps, vc.data());
    for (int64_t t = 0; t < n; ++t) {
      cpu::kda_prepare_ref(qc.data() + t * ch, kc.data() + t * ch, rb.data() + t * heads, rd.data() + t * ch, dt.data(),
                           rate.data(), heads, hd, lower, eps);
      cpu::kda_step_ref(rs.data(), qc.data() + t * ch, kc.data() + t * ch, vc.data() + t * ch, rd.data() + t * ch,
                        rb.data() + t * heads, hd, hd, ref.data() + t * ch, 0, heads);
    }
    CHECK(nmse(out, ref) < 1e-10);            // fp32 recurrence over 5 tokens against double (measured 5e-14)
    CHECK(nmse(d.get(state), rs) < 1e-10);    // the state it leaves (measured 1.2e-14)
    CHECK(nmse(d.get(window), rw) == 0);       // the window holds copies of inputs: exact
    // Token by token from the same start: bit-identical output and state.
    const Tensor w1 = d.tensor(3 * (taps - 1), ch, window0), s1 = d.tensor(ch, hd, state0);
    std::vector<float> stepped;
    for (int64_t t = 0; t < n; ++t) {
      const auto row = run(t, 1, w1, s1);
      stepped.insert(stepped.end(), row.begin(), row.end());
    }
    CHECK(same_bits(out, stepped));
    CHECK(same_bits(d.get(state), d.get(s1)));
  });
}

TEST_CASE("backend op attn_res_mix: against attn_res_mix_ref per row", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(7);
    const int64_t n = 4, dim = 48;
    std::vector<std::vector<float>> host;
    std::vector<Tensor> candidates;
    for (int i = 0; i < 3; ++i) {
      host.push_back(random_floats(n * dim, rng, 2.0f));
      candidates.push_back(d.tensor(n, dim, host.back()));
    }
    const auto w = random_floats(dim, rng);
    const Tensor out = d.tensor(n, dim);
    d.backend.attn_res_mix(candidates, d.tensor(1, dim, w), 1e-6f, out);
    std::vector<float> ref(n * dim);
    for (int64_t t = 0; t < n; ++t) {
      const float* rows[3] = {host[0].data() + t * dim, host[1].data() + t * dim, host[2].data() + t * dim};
      cpu::attn_res_mix_ref(rows, 3, w.data(), dim, 1e-6f, ref.data() + t * dim);
    }
    CHECK(nmse(d.get(out), ref) < 1e-11);  // softmax of fp32 scores against double (measured 5.3e-14)
  });
}

namespace {

// The router's definition, written out in double: sigmoid scores; bias for selection only;
// groups scored by their two best biased scores, the best topk_group kept; top-k (ties: lower
// index); unbiased weights, renormalised, times the scaling factor.
void route_ref(const RouterSpec& s, const float* logits, const float* bias, std::vector<int32_t>& ids, std::vector<double>& w) {
  std::vector<double> score(s.experts), choice(s.experts);
  for (int64_t e = 0; e < s.experts; ++e) {
    score[e] = 1.0 / (1.0 + std::exp(-double(logits[e])));
    choice[e] = score[e] + (bias ? bias[e] : 0.0);
  }
  const int64_t per = s.experts / s.n_group;
  std::vector<std::pair<double, int64_t>> groups;
  for (int64_t g = 0; g < s.n_group; ++g) {
    std::vector<double> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(v.rbegin(), v.rend());
    groups.push_back({-(v[0] + (per > 1 ? v[1] : 0.0)), g});
  }
  std::sort(groups.begin(), groups.end());
  std::vector<bool> allowed(s.experts, s.n_group == 1);
  for (int64_t i = 0; i < s.topk_group && s.n_group > 1; ++i)
    for (int64_t e = 0; e < per; ++e) allowed[groups[i].second * per + e] = true;
  std::vector<std::pair<double, int64_t>> order;
  for (int64_t e = 0; e < s.experts; ++e)
    if (allowed[e]) order.push_back({-choice[e], e});
  std::sort(order.begin(), order.end());
  ids.clear();
  for (int64_t j = 0; j < s.top_k; ++j) ids.push_back(static_cast<int32_t>(order[j].second));
  std::sort(ids.begin(), ids.end());
  double sum = 0;
  for (int32_t e : ids) sum += score[e];
  w.clear();
  for (int32_t e : ids) w.push_back((s.renormalize ? score[e] / sum : score[e]) * s.scaling);
}

}  // namespace

TEST_CASE("backend op route: ids identical and weights within 1e-6 of the definition", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(8);
    for (const RouterSpec spec : {RouterSpec{16, 4, 1, 1, true, 2.5f}, RouterSpec{32, 6, 4, 2, true, 1.0f},
                                  RouterSpec{12, 1, 1, 1, false, 1.0f}}) {
      const int64_t n = 7;
      const auto logits = random_floats(n * spec.experts, rng, 2.0f), bias = random_floats(spec.experts, rng, 0.1f);
      const Tensor ids = d.tensor(n, spec.top_k, nullptr, Elem::I32), w = d.tensor(n, spec.top_k);
      d.backend.route(spec, d.tensor(n, spec.experts, logits), d.tensor(1, spec.experts, bias), ids, w);
      std::vector<int32_t> got(n * spec.top_k);
      d.backend.download(ids, got.data());
      const auto weights = d.get(w);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<int32_t> ref_ids;
        std::vector<double> ref_w;
        route_ref(spec, logits.data() + t * spec.experts, bias.data(), ref_ids, ref_w);
        CAPTURE(spec.experts, spec.top_k, spec.n_group, t);
        CHECK(std::vector<int32_t>(got.begin() + t * spec.top_k, got.begin() + (t + 1) * spec.top_k) == ref_ids);
        for (int64_t j = 0; j < spec.top_k; ++j) CHECK(std::fabs(weights[t * spec.top_k + j] - ref_w[j]) < 1e-6);
      }
    }
  });
}

namespace {

// Random experts held on the device; acquire() counts and pins.
class TestExperts final : public ExpertSource {
 public:
  TestExperts(Device& d, int64_t count, int64_t width, int64_t in, WeightFormat f, std::mt19937& rng) {
    for (int64_t e = 0; e < count; ++e) {
      host.push_back({random_matrix(f, width, in, rng), random_matrix(f, width, in, rng), random_matrix(f, in, width, rng)});
      device.push_back({d.weight(host.back()[0]), d.weight(host.back()[1]), d.weight(host.back()[2])});
    }
  }
  Resident acquire(int32_t expert) override {
    acquired.push_back(expert);
    return {device[expert], std::make_shared<int>(expert)};
  }
  // With `arrival` set, reads "land" in that order: the first of it still pending is resident.
  size_t acquire_next(std::span<const int32_t> pending, Resident& out, bool wait) override {
    if (arrival.empty()) return ExpertSource::acquire_next(pending, out, wait);
    for (int32_t expert : arrival) {
      const auto at = std::find(pending.begin(), pending.end(), expert);
      if (at == pending.end()) continue;
      out = acquire(expert);
      return static_cast<size_t>(at - pending.begin());
    }
    FAIL("acquire_next: none of the pending experts is in the arrival order");
    return 0;
  }
  int64_t capacity() const override { return static_cast<int64_t>(device.size()); }  // every expert is resident
  std::vector<std::array<TestMatrix, 3>> host;
  std::vector<std::array<Weight, 3>> device;
  std::vector<int32_t> acquired;
  std::vector<int32_t> arrival;
};

}  // namespace

namespace {

// Random rows of k distinct experts of `experts`, ascending (as route() writes them), and their union.
std::pair<std::vector<int32_t>, std::vector<int32_t>> random_routing(int64_t n, int64_t k, int64_t experts, std::mt19937& rng) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + k);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  std::vector<int32_t> chosen = ids;
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  return {ids, chosen};
}

// expert_slots by its definition: per expert of the union, the slots t * k + j that chose it, t ascending.
std::vector<std::vector<int32_t>> slots_ref(const std::vector<int32_t>& ids, const std::vector<int32_t>& chosen) {
  std::vector<std::vector<int32_t>> lists(chosen.size());
  for (size_t s = 0; s < ids.size(); ++s)
    lists[std::lower_bound(chosen.begin(), chosen.end(), ids[s]) - chosen.begin()].push_back(static_cast<int32_t>(s));
  return lists;
}

}  // namespace

TEST_CASE("backend op expert_slots: each expert's slots, rows ascending, as the definition lists them", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(31);
    for (auto [n, k, experts] : {std::array<int64_t, 3>{1, 2, 6}, {7, 3, 10}, {33, 8, 64}}) {
      const auto [ids, chosen] = random_routing(n, k, experts, rng);
      const int64_t count = static_cast<int64_t>(chosen.size());
      const Tensor lists = d.tensor(count, n, nullptr, Elem::I32), counts = d.tensor(count, 1, nullptr, Elem::I32);
      d.backend.expert_slots(d.tensor(n, k, ids.data(), Elem::I32), d.tensor(count, 1, chosen.data(), Elem::I32), lists, counts);
      std::vector<int32_t> got_lists(count * n), got_counts(count);
      d.backend.download(lists, got_lists.data());
      d.backend.download(counts, got_counts.data());
      const auto ref = slots_ref(ids, chosen);
      CAPTURE(n, k, experts);
      for (int64_t e = 0; e < count; ++e) {
        REQUIRE(got_counts[e] == static_cast<int32_t>(ref[e].size()));
        CHECK(std::vector<int32_t>(got_lists.begin() + e * n, got_lists.begin() + e * n + got_counts[e]) == ref[e]);
      }
    }
  });
}

TEST_CASE("backend op expert_ffn: a batch's slots against the twins, other slots untouched", "[backend-ops]") {
  static constexpr double kBound = 1e-10;  // fp32 matmuls and SiTU against double (as the whole op)
  for_each_backend([](Device& d) {
    std::mt19937 rng(32);
    for (WeightFormat f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::INT4_G32}) {
      const int64_t n = 5, k = 3, in = 64, width = 32, experts = 7;
      const auto [ids, chosen] = random_routing(n, k, experts, rng);
      const auto ref_lists = slots_ref(ids, chosen);
      const int64_t count = static_cast<int64_t>(chosen.size());
      std::vector<int32_t> lists(count * n, -1), counts(count);
      for (int64_t e = 0; e < count; ++e) {
        counts[e] = static_cast<int32_t>(ref_lists[e].size());
        std::copy(ref_lists[e].begin(), ref_lists[e].end(), lists.begin() + e * n);
      }
      std::vector<std::array<TestMatrix, 3>> host;
      for (int64_t e = 0; e < count; ++e)
        host.push_back({random_matrix(f, width, in, rng), random_matrix(f, width, in, rng), random_matrix(f, in, width, rng)});
      // A batch of every other expert of the union (as many as the backend takes), in descending order.
      std::vector<ResidentExpert> batch;
      for (int64_t e = count - 1; e >= 0 && static_cast<int64_t>(batch.size()) < d.backend.expert_batch(); e -= 2)
        batch.push_back({{d.weight(host[e][0]), d.weight(host[e][1]), d.weight(host[e][2])}, e});
      const auto x = random_floats(n * in, rng);
      const std::vector<float> sentinel(n * k * in, 12345.0f);
      const Tensor y = d.tensor(n * k, in, sentinel);
      const GatedActivation act{GatedActivation::kSiTU, 4.0f, 25.0f};
      d.backend.expert_ffn(batch, d.tensor(n, in, x), d.tensor(count, n, lists.data(), Elem::I32),
                           d.tensor(count, 1, counts.data(), Elem::I32), act, d.tensor(n * k, width), y);
      const std::vector<float> got = d.get(y);
      std::vector<float> want = sentinel, gate(width), up(width);
      for (const ResidentExpert& e : batch)
        for (int32_t slot : ref_lists[e.list]) {
          const auto& m = host[e.list];
          const float* xt = x.data() + (slot / k) * in;
          cpu::matmul_rows_ref(m[0].view(), xt, in, 1, gate.data(), width, 0, width);
          cpu::matmul_rows_ref(m[1].view(), xt, in, 1, up.data(), width, 0, width);
          cpu::situ_mul_ref(gate.data(), up.data(), width, act.beta, act.linear_beta);
          cpu::matmul_rows_ref(m[2].view(), gate.data(), width, 1, want.data() + slot * in, in, 0, in);
        }
      CAPTURE(test::format_name(f), batch.size());
      for (int64_t s = 0; s < n * k; ++s) {
        const std::vector<float> got_row(got.begin() + s * in, got.begin() + (s + 1) * in);
        const std::vector<float> want_row(want.begin() + s * in, want.begin() + (s + 1) * in);
        CAPTURE(s);
        if (want_row == std::vector<float>(in, 12345.0f)) CHECK(got_row == want_row);
        else CHECK(nmse(got_row, want_row) < kBound);
      }
    }
  });
}

TEST_CASE("backend op expert_combine: each row summed in ascending expert order, whatever order its slots list them",
          "[backend-ops]") {
  static constexpr double kBound = 1e-12;  // k fp32 multiply-adds against double
  for_each_backend([](Device& d) {
    std::mt19937 rng(33);
    const int64_t n = 6, k = 4, cols = 96, experts = 12;
    const auto [ids, chosen] = random_routing(n, k, experts, rng);
    const auto y = random_floats(n * k * cols, rng, 3.0f), weights = random_floats(n * k, rng);
    const auto combine = [&](const std::vector<int32_t>& i, const std::vector<float>& w, const std::vector<float>& ys) {
      const Tensor out = d.tensor(n, cols);
      d.backend.expert_combine(d.tensor(n, k, i.data(), Elem::I32), d.tensor(n, k, w), d.tensor(n * k, cols, ys), out);
      return d.get(out);
    };
    const std::vector<float> ascending = combine(ids, weights, y);
    std::vector<double> ref(n * cols, 0.0);
    for (int64_t s = 0; s < n * k; ++s)
      for (int64_t c = 0; c < cols; ++c) ref[(s / k) * cols + c] += double{weights[s]} * y[s * cols + c];
    CHECK(nmse(ascending, std::vector<float>(ref.begin(), ref.end())) < kBound);
    // The same choices with each row's slots reversed: the same sums, bit for bit.
    std::vector<int32_t> ids_r(ids.size());
    std::vector<float> weights_r(weights.size()), y_r(y.size());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t from = t * k + j, to = t * k + (k - 1 - j);
        ids_r[to] = ids[from], weights_r[to] = weights[from];
        std::copy_n(y.begin() + from * cols, cols, y_r.begin() + to * cols);
      }
    CHECK(same_bits(combine(ids_r, weights_r, y_r), ascending));
  });
}

TEST_CASE("expert driver: weighted sums in ascending expert order against the twins", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(9);
    for (WeightFormat f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::INT4_G32}) {
      const int64_t n = 4, k = 2, in = 64, width = 32, experts = 6;
      TestExperts source(d, experts, width, in, f, rng);
      const std::vector<int32_t> ids = {0, 3, 3, 5, 0, 1, 2, 3};
      const std::vector<float> weights = {0.7f, 0.3f, 1.5f, -0.5f, 0.25f, 0.75f, 1.0f, 2.0f};
      const std::vector<int32_t> chosen = {0, 1, 2, 3, 5};
      const auto x = random_floats(n * in, rng);
      const Tensor out = d.tensor(n, in);
      const GatedActivation act{GatedActivation::kSiTU, 4.0f, 25.0f};
      Scratch scratch(d.backend);
      run_experts(d.backend, scratch, source, d.tensor(n, in, x), d.tensor(n, k, ids.data(), Elem::I32), d.tensor(n, k, weights), chosen, width, act, out);
      CHECK(source.acquired == chosen);  // each once, ascending
      std::vector<float> ref(n * in, 0.0f), gate(width), up(width), y(in);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
          const auto& m = source.host[ids[t * k + j]];
          cpu::matmul_rows_ref(m[0].view(), x.data() + t * in, in, 1, gate.data(), width, 0, width);
          cpu::matmul_rows_ref(m[1].view(), x.data() + t * in, in, 1, up.data(), width, 0, width);
          cpu::situ_mul_ref(gate.data(), up.data(), width, act.beta, act.linear_beta);
          cpu::matmul_rows_ref(m[2].view(), gate.data(), width, 1, y.data(), in, 0, in);
          for (int64_t i = 0; i < in; ++i) ref[t * in + i] += weights[t * k + j] * y[i];
        }
      CAPTURE(test::format_name(f));
      CHECK(nmse(d.get(out), ref) < 1e-10);  // fp32 matmuls and SiTU against double (measured 6.5e-14)
    }
  });
}

// Reads land in any order: the driver runs experts as they arrive, on every backend, and
// expert_combine still sums each row in ascending expert order, so the output is the ascending
// run's bit for bit.
TEST_CASE("expert driver: experts arriving in any order give the ascending result bit for bit", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(19);
    const int64_t n = 5, k = 3, in = 64, width = 32, experts = 9;
    TestExperts source(d, experts, width, in, WeightFormat::MXFP4, rng);
    std::vector<int32_t> ids(n * k);
    std::vector<float> weights(n * k);
    for (int64_t t = 0; t < n; ++t) {  // k distinct experts a row, ascending
      std::vector<int32_t> all(experts);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + k);
      std::copy_n(all.begin(), k, ids.begin() + t * k);
    }
    for (float& w : weights) w = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    std::vector<int32_t> chosen = ids;
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    const auto x = random_floats(n * in, rng);
    const GatedActivation act{GatedActivation::kSiTU, 4.0f, 25.0f};
    const auto run = [&](const std::vector<int32_t>& arrival) {
      source.arrival = arrival;
      source.acquired.clear();
      const Tensor out = d.tensor(n, in);
      Scratch scratch(d.backend);
      run_experts(d.backend, scratch, source, d.tensor(n, in, x), d.tensor(n, k, ids.data(), Elem::I32), d.tensor(n, k, weights), chosen, width, act, out);
      std::vector<int32_t> sorted = source.acquired;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == chosen);  // each once
      return d.get(out);
    };
    const auto ascending = run({});
    std::vector<int32_t> reversed(chosen.rbegin(), chosen.rend()), shuffled = chosen;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (const auto& order : {reversed, shuffled}) {
      const auto got = run(order);
      CAPTURE(test::join_ids(order, ","));
      CHECK(same_bits(got, ascending));
      CHECK(source.acquired == order);  // run as they arrived
    }
  });
}

TEST_CASE("backend memory ops: upload, download, copy and fill round-trip exactly", "[backend-ops]") {
  for_each_backend([](Device& d) {
    std::mt19937 rng(10);
    const auto v = random_floats(6 * 10, rng);
    const Tensor a = d.tensor(6, 10, v), b = d.tensor(6, 10);
    d.backend.fill(b, 2.5f);
    d.backend.copy(a.row_range(1, 3).col_range(2, 5), b.row_range(2, 3).col_range(4, 5));
    std::vector<float> ref(60, 2.5f);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 5; ++c) ref[(2 + r) * 10 + 4 + c] = v[(1 + r) * 10 + 2 + c];
    d.backend.wait(d.backend.commit());
    CHECK(same_bits(d.get(b), ref));
    CHECK(same_bits(d.get(a), v));
  });
}

// Issue 13: the model is only ops. Without a host address of a tensor, code cannot do arithmetic
// on activations; the model reaches the host only through download() (the expert ids, the
// logits, and the layer observers of the golden tests). spine.cpp, which reads weights into
// buffers at load, is the one file allowed host addresses.
TEST_CASE("src/model holds no activation arithmetic: no host address of a tensor outside the spine loader", "[backend-ops]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(deltafin::test::fixtures_dir()).parent_path().parent_path() / "src" / "model";
  REQUIRE(fs::is_directory(dir));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename() == "spine.cpp") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    ++files;
    for (const char* pattern : {".f32()", ".i32()", "host()", "host_view("}) {
      CAPTURE(entry.path().filename().string(), pattern);
      CHECK(text.find(pattern) == std::string::npos);
    }
  }
  CHECK(files > 10);
}
