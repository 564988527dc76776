// Decode-time matmul throughput against the memory-bandwidth ceiling measured in the same run.
// For each weight format: y = W x at n_pos = 1 over a rotating set of matrices larger than the
// last-level cache (so weights stream from DRAM, as routed experts do), on one thread and on
// all threads through the CPU backend. The ceiling is a plain SIMD read (sum) of the same bytes.
// Prints a markdown table: GB/s of weight bytes, median of RUNS, and the ratio to the ceiling.
// Usage: kernel_bench [RUNS=5] [ROWS=3072] [COLS=3584] [WORKING_SET_MB=512]
#include <hwy/highway.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/matmul.hpp"
#include "io/aligned_buffer.hpp"

using namespace deltafin;
namespace hn = hwy::HWY_NAMESPACE;

namespace {

using Clock = std::chrono::steady_clock;

struct Format {
  const char* name;
  WeightFormat format;
};

// Bytes of one [rows, cols] matrix and of its scales.
std::pair<size_t, size_t> sizes(WeightFormat f, int64_t rows, int64_t cols) {
  switch (f) {
    case WeightFormat::F32: return {rows * cols * 4, 0};
    case WeightFormat::BF16:
    case WeightFormat::F16: return {rows * cols * 2, 0};
    case WeightFormat::F8_E4M3_BLOCK128: return {rows * cols, ((rows + 127) / 128) * ((cols + 127) / 128) * 4};
    case WeightFormat::MXFP4: return {rows * cols / 2, rows * (cols / 32)};
    case WeightFormat::INT4_G32: return {rows * ((cols + 7) / 8) * 4, rows * ((cols + 31) / 32) * 2};
  }
  return {0, 0};
}

// Fills weights with bytes that decode to finite values in every format.
void fill(WeightFormat f, std::byte* data, size_t n, std::byte* scales, size_t ns) {
  std::mt19937 rng(1);
  for (size_t i = 0; i < n; ++i) data[i] = std::byte(rng() & (f == WeightFormat::F8_E4M3_BLOCK128 ? 0x77 : 0x3F));
  if (f == WeightFormat::F8_E4M3_BLOCK128)
    for (size_t i = 0; i < ns / 4; ++i) reinterpret_cast<float*>(scales)[i] = 0.01f;
  else if (f == WeightFormat::MXFP4)
    for (size_t i = 0; i < ns; ++i) scales[i] = std::byte(120);
  else if (f == WeightFormat::INT4_G32)
    for (size_t i = 0; i < ns / 2; ++i) reinterpret_cast<uint16_t*>(scales)[i] = 0x3C00;  // bf16 ~0.0078
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Sum of all floats in [p, p + n): the read-bandwidth probe.
float read_sum(const float* p, size_t n) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  const size_t step = 4 * hn::Lanes(d);
  size_t i = 0;
  for (; i + step <= n; i += step) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + hn::Lanes(d)));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * hn::Lanes(d)));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * hn::Lanes(d)));
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 3072, cols = argc > 3 ? std::atoll(argv[3]) : 3584;
  const size_t working_set = (argc > 4 ? std::atoll(argv[4]) : 512) * (size_t(1) << 20);
  const Format formats[] = {{"BF16", WeightFormat::BF16}, {"F16", WeightFormat::F16},
                            {"FP8 block", WeightFormat::F8_E4M3_BLOCK128}, {"MXFP4", WeightFormat::MXFP4},
                            {"INT4 g32", WeightFormat::INT4_G32}};
  auto all = make_cpu_backend(0);
  auto one = make_cpu_backend(1);
  std::vector<float> x(cols, 0.5f), y(rows);

  // Ceiling: a SIMD read of the working set, one thread and all threads.
  AlignedBuffer probe(working_set);
  std::fill_n(reinterpret_cast<float*>(probe.data()), working_set / 4, 1.0f);
  auto probe_gbs = [&](int threads) {
    std::vector<double> rates;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = Clock::now();
      std::vector<float> sums(threads);
      std::vector<std::thread> pool;
      const size_t per = working_set / 4 / threads;
      for (int t = 0; t < threads; ++t)  // 4 passes each, so thread start-up is a small part of the time
        pool.emplace_back([&, t] {
          for (int pass = 0; pass < 4; ++pass)
            sums[t] += read_sum(reinterpret_cast<const float*>(probe.data()) + t * per, per);
        });
      for (auto& th : pool) th.join();
      rates.push_back(4 * working_set / 1e9 / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return median(rates);
  };
  const double ceiling1 = probe_gbs(1), ceilingN = probe_gbs(all->threads());
  std::printf("Matrix [%lld, %lld], n_pos = 1, %zu MB rotating working set, median of %d runs; "
              "ceiling = SIMD read of the same working set.\n\n",
              (long long)rows, (long long)cols, working_set >> 20, runs);
  std::printf("| format | GB/s 1 thread | vs ceiling (%.1f GB/s) | GB/s %d threads | vs ceiling (%.1f GB/s) |\n",
              ceiling1, all->threads(), ceilingN);
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (const Format& f : formats) {
    const auto [bytes, scale_bytes] = sizes(f.format, rows, cols);
    const size_t count = std::max<size_t>(2, working_set / (bytes + scale_bytes));
    std::vector<AlignedBuffer> data, scales;
    std::vector<WeightView> views;
    for (size_t i = 0; i < count; ++i) {
      data.emplace_back(bytes);
      scales.emplace_back(scale_bytes);
      fill(f.format, data.back().data(), bytes, scales.back().data(), scale_bytes);
      views.push_back(WeightView{f.format, data.back().data(), rows, cols, scale_bytes ? scales.back().data() : nullptr});
    }
    auto rate = [&](Backend& b) {
      std::vector<double> rates;
      for (int r = 0; r < runs; ++r) {
        const auto t0 = Clock::now();
        for (const WeightView& v : views) b.matmul(v, x.data(), 1, y.data());
        rates.push_back(count * (bytes + scale_bytes) / 1e9 / std::chrono::duration<double>(Clock::now() - t0).count());
      }
      return median(rates);
    };
    const double r1 = rate(*one), rn = rate(*all);
    std::printf("| %s | %.2f | %.0f %% | %.2f | %.0f %% |\n", f.name, r1, 100 * r1 / ceiling1, rn, 100 * rn / ceilingN);
  }
  return 0;
}
