// What checking every placed record on every read costs (io/expert_reader.cpp): the XXH3 of the
// record and, for an expert, the NaN/Inf scan of its weights and scales (find_non_finite), on one
// thread (a drive's I/O thread checks the record it just completed), against the memory-read
// rate over the same bytes measured in the same run (a plain sum: the ceiling of any pass over a
// record that just landed in DRAM). Records are K3 routed experts (gate, up [3072, 3584], down
// [3584, 3072]) in each expert format, a rotating working set larger than the last-level cache,
// filled with finite values. Rates are GB (1e9 bytes) per second of the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), so a shared, busy machine measures what a check costs a core rather
// than its share of one; medians of RUNS runs. Prints a markdown table.
// run-record-check-bench.sh sets these against the drives' read ceilings.
// Usage: record_check_bench [RUNS=5]
#include <time.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "util/aligned_buffer.hpp"
#include "weights/finite_check.hpp"

using namespace deltafin;

namespace {

constexpr int64_t kRows = 3072, kCols = 3584;    // gate and up; down is [kCols, kRows]
constexpr uint64_t kWorkingSet = 768ull << 20;   // rotating records, far past any last-level cache

struct Format {
  const char* name;
  WeightFormat format;
};

// Bytes of one [rows, cols] matrix and of its scales in `f` (cpu/weight_format.hpp).
std::pair<uint64_t, uint64_t> matrix_bytes(WeightFormat f, int64_t rows, int64_t cols) {
  return {stored_data_bytes(f, rows, cols), stored_scale_bytes(f, rows, cols)};
}

// One record: three matrices, each data then scales, back to back (64-byte aligned parts), with
// finite contents (random bytes, exponents kept below all-ones where a format has them).
struct Record {
  AlignedBuffer bytes;
  std::array<WeightView, 3> views;
};

Record make_record(WeightFormat f, std::mt19937_64& rng) {
  const int64_t shapes[3][2] = {{kRows, kCols}, {kRows, kCols}, {kCols, kRows}};
  uint64_t offsets[3][2], total = 0;
  for (int p = 0; p < 3; ++p) {
    const auto [data, scales] = matrix_bytes(f, shapes[p][0], shapes[p][1]);
    offsets[p][0] = total, total = (total + data + 63) / 64 * 64;
    offsets[p][1] = total, total = (total + scales + 63) / 64 * 64;
  }
  Record r{AlignedBuffer(total), {}};
  auto* b = reinterpret_cast<uint8_t*>(r.bytes.data());
  for (uint64_t i = 0; i < total; i += 8) {
    const uint64_t v = rng();
    std::memcpy(b + i, &v, std::min<uint64_t>(8, total - i));
  }
  for (int p = 0; p < 3; ++p) {
    const auto [data, scales] = matrix_bytes(f, shapes[p][0], shapes[p][1]);
    uint8_t* d = b + offsets[p][0];
    uint8_t* s = b + offsets[p][1];
    switch (f) {
      case WeightFormat::BF16:  // high byte of each bf16: exponent below all ones
        for (uint64_t i = 1; i < data; i += 2) d[i] &= 0xBF;
        break;
      case WeightFormat::F8_E4M3_BLOCK128:
        for (uint64_t i = 0; i < data; ++i) d[i] &= 0xBF;  // never the 0x7F/0xFF NaN codes
        for (uint64_t i = 3; i < scales; i += 4) s[i] = 0x3F;  // f32 scales near 1
        break;
      case WeightFormat::MXFP4:
        for (uint64_t i = 0; i < scales; ++i) s[i] = static_cast<uint8_t>(120 + s[i] % 16);  // E8M0 near 1
        break;
      case WeightFormat::INT4_G32:
        for (uint64_t i = 1; i < scales; i += 2) s[i] = 0x3C;  // bf16 scales near 1
        break;
      default: break;
    }
    r.views[p] = WeightView{f, d, shapes[p][0], shapes[p][1], scales ? s : nullptr};
  }
  return r;
}

// The memory-read ceiling over a record: a sum the compiler vectorises.
uint64_t read_sum(const std::byte* p, uint64_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  uint64_t i = 0;
  for (; i + 4 <= n / 8; i += 4) a += w[i], b += w[i + 1], c += w[i + 2], d += w[i + 3];
  return a + b + c + d;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec / 1e9;
}

// GB per CPU-second of `check` over every record of the set, median of `runs`.
double rate(const std::vector<Record>& set, int runs, const std::function<uint64_t(const Record&)>& check) {
  uint64_t bytes = 0, sink = 0;
  for (const Record& r : set) bytes += r.bytes.size();
  std::vector<double> rates;
  for (int run = 0; run < runs; ++run) {
    const double t0 = thread_cpu_seconds();
    for (const Record& r : set) sink += check(r);
    rates.push_back(bytes / (thread_cpu_seconds() - t0) / 1e9);
  }
  if (sink == 42) std::puts("");  // keep the work
  return median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const Format formats[] = {{"MXFP4", WeightFormat::MXFP4},
                            {"INT4 (g32, bf16 scales)", WeightFormat::INT4_G32},
                            {"FP8 e4m3 (128-blocks)", WeightFormat::F8_E4M3_BLOCK128},
                            {"BF16", WeightFormat::BF16}};
  std::printf("K3 routed-expert records (gate, up [%lld, %lld], down [%lld, %lld]), a rotating working set of about %llu MB "
              "per format, one thread, GB of record bytes per CPU-second, median of %d runs.\n\n",
              (long long)kRows, (long long)kCols, (long long)kCols, (long long)kRows,
              (unsigned long long)(kWorkingSet >> 20), runs);
  std::printf("| format | record MB | memory read (sum) | XXH3 | of read | NaN/Inf scan | XXH3 + scan (the reader's check) | of read |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(33);
  for (const Format& f : formats) {
    std::vector<Record> set;
    set.push_back(make_record(f.format, rng));
    const uint64_t record = set.front().bytes.size();
    while (set.size() * record < kWorkingSet) set.push_back(make_record(f.format, rng));
    for (const Record& r : set)
      for (const WeightView& v : r.views)
        if (find_non_finite(v)) {
          std::fprintf(stderr, "record_check_bench: a %s record is not finite\n", f.name);
          return 1;
        }
    const double read = rate(set, runs, [](const Record& r) { return read_sum(r.bytes.data(), r.bytes.size()); });
    const double xxh3 = rate(set, runs, [](const Record& r) { return XXH3_64bits(r.bytes.data(), r.bytes.size()); });
    const auto scan = [](const Record& r) {
      uint64_t bad = 0;
      for (const WeightView& v : r.views) bad += find_non_finite(v).has_value();
      return bad;
    };
    const double finite = rate(set, runs, scan);
    const double both = rate(set, runs, [&](const Record& r) { return XXH3_64bits(r.bytes.data(), r.bytes.size()) + scan(r); });
    std::printf("| %s | %.1f | %.2f | %.2f | %.0f %% | %.1f | %.2f | %.0f %% |\n", f.name, record / 1e6, read, xxh3,
                100 * xxh3 / read, finite, both, 100 * both / read);
  }
  return 0;
}
