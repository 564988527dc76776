// Matmul throughput per SIMD target and weight format, against two ceilings measured in the
// same run: the memory-read rate (a SIMD sum over the same working set, best target) and the
// target's fp32 FMA peak. Weights are a rotating set of K3 routed-expert-shaped matrices larger
// than the last-level cache (so they stream from DRAM, as routed experts do), filled with values
// shaped like real weights (normal(0, 0.02) for bf16/f16, no subnormals). Each arm runs on one
// thread and on all threads (KERNEL_BENCH_THREADS=N: on N) through the CPU backend.
//   n_pos 1:  GB/s of weight bytes, and the ratio to the read ceiling.
//   n_pos 5:  time of a 5-position call / time of a 1-position call (a speculative verify pass).
//   n_pos 64: positions per second / the 1-position rate (a prefill chunk), and the share of
//             the FMA peak it reaches (64 positions are compute-bound: 2 * 64 flops a weight).
// Prints markdown tables, medians of RUNS runs.
// Usage: kernel_bench [RUNS=5] [TARGET...]   (targets as in `deltafin --version`; default all)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernel_bench.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of all floats in [p, p + n): the read-bandwidth probe.
float ReadSum(const float* p, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + N));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * N));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * N));
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += p[i];
  return s;
}

// `iters` rounds of 12 independent vector FMAs; returns the flops done (and keeps the result).
double FmaPeak(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999f), c = hn::Set(d, 1e-3f);
  hn::Vec<decltype(d)> acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = hn::Set(d, static_cast<float>(i));
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) acc[i] = hn::MulAdd(acc[i], m, c);
  auto s = acc[0];
  for (int i = 1; i < 12; ++i) s = hn::Add(s, acc[i]);
  *sink += hn::GetLane(s);
  return 2.0 * 12 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iters);
}

}  // namespace bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/matmul.hpp"
#include "cpu/simd_target.hpp"
#include "util/aligned_buffer.hpp"

namespace bench {
HWY_EXPORT(ReadSum);
HWY_EXPORT(FmaPeak);
}  // namespace bench

using namespace deltafin;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kRows = 3072, kCols = 3584;  // a K3 routed expert's gate or up projection
constexpr size_t kWorkingSet = size_t{512} << 20;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `runs` of work() run on `threads` threads at once; work(t) returns the units it did.
double rate(int runs, int threads, const std::function<double(int)>& work) {
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) {
    std::vector<double> done(threads);
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { done[t] = work(t); });
    for (auto& th : pool) th.join();
    double total = 0;
    for (double d : done) total += d;
    rates.push_back(total / seconds_since(t0));
  }
  return median(rates);
}

struct Format {
  const char* name;
  WeightFormat format;
};

// Bytes of one [rows, cols] matrix and of its scales (cpu/weight_format.hpp).
std::pair<size_t, size_t> sizes(WeightFormat f) {
  return {stored_data_bytes(f, kRows, kCols), stored_scale_bytes(f, kRows, kCols)};
}

uint16_t f32_to_f16_bits(float v) {  // round to nearest; |v| well inside the normal fp16 range
  const uint32_t b = std::bit_cast<uint32_t>(v);
  const int e = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
  if (e <= 0) return static_cast<uint16_t>((b >> 16) & 0x8000);  // flushed: never a subnormal
  const uint32_t m = ((b & 0x7fffff) + 0x1000) >> 13;
  return static_cast<uint16_t>(((b >> 16) & 0x8000) | ((e << 10) + m));
}

// A cheap generator for the fill (hundreds of MB): xorshift64*, and normal(0, 0.02) values drawn
// from a 4096-entry table sampled once.
struct FillRng {
  uint64_t state;
  explicit FillRng(uint32_t seed) : state(0x9e3779b97f4a7c15ull * (seed + 1)) {}
  uint64_t next() {
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return state * 0x2545f4914f6cdd1dull;
  }
  float normal() {
    static const std::vector<float> table = [] {
      std::mt19937 rng(1);
      std::normal_distribution<float> dist(0.0f, 0.02f);
      std::vector<float> t(4096);
      for (float& v : t) v = dist(rng);
      return t;
    }();
    return table[next() >> 52];
  }
};

// Values shaped like real weights: normal(0, 0.02) floats with no subnormals; uniform fp8 codes
// (NaN codes excluded) and 4-bit codes, with the scales real checkpoints carry.
void fill(WeightFormat f, std::byte* data, size_t n, std::byte* scales, size_t ns, uint32_t seed) {
  FillRng rng(seed);
  auto* u16 = reinterpret_cast<uint16_t*>(data);
  const auto random_bytes = [&](std::byte* p, size_t count) {
    for (size_t i = 0; i < count; i += 8) {
      const uint64_t v = rng.next();
      std::memcpy(p + i, &v, std::min<size_t>(8, count - i));
    }
  };
  switch (f) {
    case WeightFormat::F32:
      for (size_t i = 0; i < n / 4; ++i) reinterpret_cast<float*>(data)[i] = rng.normal();
      break;
    case WeightFormat::BF16:
      for (size_t i = 0; i < n / 2; ++i) u16[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(rng.normal()) >> 16);
      break;
    case WeightFormat::F16:
      for (size_t i = 0; i < n / 2; ++i) u16[i] = f32_to_f16_bits(rng.normal());
      break;
    case WeightFormat::F8_E4M3_BLOCK128:
      random_bytes(data, n);
      for (size_t i = 0; i < n; ++i)
        if ((std::to_integer<uint8_t>(data[i]) & 0x7f) == 0x7f) data[i] ^= std::byte{1};
      for (size_t i = 0; i < ns / 4; ++i) reinterpret_cast<float*>(scales)[i] = 1e-4f;
      break;
    case WeightFormat::MXFP4:
      random_bytes(data, n);
      for (size_t i = 0; i < ns; ++i) scales[i] = std::byte(118 + rng.next() % 4);  // 2^-9 .. 2^-6
      break;
    case WeightFormat::INT4_G32:
      random_bytes(data, n);
      for (size_t i = 0; i < ns / 2; ++i) reinterpret_cast<uint16_t*>(scales)[i] = 0x3b80 + rng.next() % 64;  // ~0.004
      break;
  }
}

// A rotating set of matrices of one format, `bytes` in all.
struct MatrixSet {
  std::vector<AlignedBuffer> data, scales;
  std::vector<WeightView> views;
  size_t matrix_bytes = 0;
  MatrixSet(WeightFormat f, size_t bytes) {
    const auto [b, sb] = sizes(f);
    matrix_bytes = b + sb;
    const size_t count = std::max<size_t>(2, bytes / matrix_bytes);
    for (size_t i = 0; i < count; ++i) {
      data.emplace_back(b);
      scales.emplace_back(sb);
      fill(f, data.back().data(), b, scales.back().data(), sb, static_cast<uint32_t>(i + 1));
      views.push_back(WeightView{f, data.back().data(), kRows, kCols, sb ? scales.back().data() : nullptr});
    }
  }
};

// Calls per second of y = W x at n_pos over the first `count` matrices of the set, on `backend`.
double calls_per_second(int runs, Backend& backend, const MatrixSet& set, int64_t n_pos, size_t count) {
  std::vector<float> x(static_cast<size_t>(n_pos * kCols)), y(static_cast<size_t>(n_pos * kRows));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  // The host memory wrapped as backend buffers (no copy on the CPU).
  const auto as_bytes = [](const void* p) { return const_cast<std::byte*>(static_cast<const std::byte*>(p)); };
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Weight> weights;
  for (size_t i = 0; i < count; ++i) {
    const WeightView& v = set.views[i];
    buffers.push_back(backend.wrap(as_bytes(v.data), set.data[i].size()));
    Buffer* scales = v.scales ? (buffers.push_back(backend.wrap(as_bytes(v.scales), set.scales[i].size())), buffers.back().get()) : nullptr;
    weights.push_back({v.format, v.rows, v.cols, buffers[buffers.size() - (scales ? 2 : 1)].get(), 0, scales, 0});
  }
  const auto xb = backend.wrap(as_bytes(x.data()), 4 * x.size()), yb = backend.wrap(as_bytes(y.data()), 4 * y.size());
  const Tensor xt = Tensor::of(*xb, n_pos, kCols), yt = Tensor::of(*yb, n_pos, kRows);
  backend.matmul(weights[0], xt, yt);  // warm-up: decode order tables, pools
  return rate(runs, 1, [&](int) {
    for (size_t i = 0; i < count; ++i) backend.matmul(weights[i], xt, yt);
    return static_cast<double>(count);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::vector<std::string> targets(argv + std::min(argc, 2), argv + argc);
  if (targets.empty()) targets = cpu::simd_available();
  const char* threads_env = std::getenv("KERNEL_BENCH_THREADS");  // the second column's threads
  auto all = make_cpu_backend(threads_env ? std::max(1, std::atoi(threads_env)) : 0);
  auto one = make_cpu_backend(1);
  const int threads = all->threads();

  // Memory ceiling, on the best target.
  AlignedBuffer probe(kWorkingSet);
  std::fill_n(reinterpret_cast<float*>(probe.data()), kWorkingSet / 4, 1.0f);
  float sink = 0;
  auto read_rate = [&](int n) {
    const size_t per = kWorkingSet / 4 / n;
    return rate(runs, n, [&](int t) {
      for (int pass = 0; pass < 4; ++pass)
        sink += HWY_DYNAMIC_DISPATCH(bench::ReadSum)(reinterpret_cast<const float*>(probe.data()) + t * per, per);
      return 4.0 * per * 4 / 1e9;
    });
  };
  const double ceiling1 = read_rate(1), ceilingN = read_rate(threads);
  std::printf("Matrices [%lld, %lld] (a K3 routed expert's gate/up), %zu MB rotating working set, median of %d runs.\n"
              "Memory ceiling: SIMD read of the same working set, %.1f GB/s on 1 thread, %.1f GB/s on %d.\n\n",
              (long long)kRows, (long long)kCols, kWorkingSet >> 20, runs, ceiling1, ceilingN, threads);

  const Format formats[] = {{"BF16", WeightFormat::BF16}, {"F16", WeightFormat::F16},
                            {"FP8 block", WeightFormat::F8_E4M3_BLOCK128}, {"MXFP4", WeightFormat::MXFP4},
                            {"INT4 g32", WeightFormat::INT4_G32}};
  std::vector<MatrixSet> sets;
  for (const Format& f : formats) sets.emplace_back(f.format, kWorkingSet);
  std::printf("| target | format | 1 thread: GB/s | vs ceiling | 5 pos ÷ 1 pos time | 64 pos ÷ 1 pos rate | 64 pos vs FMA peak "
              "| %d threads: GB/s | vs ceiling | 5 pos ÷ 1 pos time | 64 pos ÷ 1 pos rate | 64 pos vs FMA peak |\n",
              threads);
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<std::tuple<std::string, double, double>> fma_peaks;
  for (const std::string& target : targets) {
    cpu::SimdScope scope(target);
    const double fma1 = rate(runs, 1, [&](int) { return HWY_DYNAMIC_DISPATCH(bench::FmaPeak)(20'000'000, &sink) / 1e9; });
    const double fmaN = rate(runs, threads, [&](int) { return HWY_DYNAMIC_DISPATCH(bench::FmaPeak)(20'000'000, &sink) / 1e9; });
    fma_peaks.emplace_back(target, fma1, fmaN);
    for (size_t i = 0; i < sets.size(); ++i) {
      std::printf("| %s | %s", target.c_str(), formats[i].name);
      for (auto [backend, ceiling, fma] : {std::tuple{one.get(), ceiling1, fma1}, std::tuple{all.get(), ceilingN, fmaN}}) {
        // 64 positions are compute-bound: a set of 64 MB (twice this machine class's LLC) keeps it short.
        const size_t all_count = sets[i].views.size();
        const size_t count64 = std::min(all_count, std::max<size_t>(2, (size_t{64} << 20) / sets[i].matrix_bytes));
        const double c1 = calls_per_second(runs, *backend, sets[i], 1, all_count);
        const double c5 = calls_per_second(runs, *backend, sets[i], 5, all_count);
        const double c64 = calls_per_second(runs, *backend, sets[i], 64, count64);
        const double gbs = c1 * static_cast<double>(sets[i].matrix_bytes) / 1e9;
        const double gflops64 = c64 * 64 * 2.0 * kRows * kCols / 1e9;
        std::printf(" | %.2f | %.0f %% | %.2f | %.1f | %.0f %%", gbs, 100 * gbs / ceiling, c1 / c5, 64 * c64 / c1,
                    100 * gflops64 / fma);
      }
      std::printf(" |\n");
      std::fflush(stdout);
    }
  }
  std::printf("\nFMA peak (12 independent vector FMA chains a thread), GFLOP/s on 1 and %d threads:", threads);
  for (const auto& [target, f1, fn] : fma_peaks) std::printf(" %s %.0f / %.0f;", target.c_str(), f1, fn);
  std::printf("\n");
  return sink == 12345.0f ? 1 : 0;  // keeps the probes' results alive
}
#endif  // HWY_ONCE
