// The CUDA expert op at Kimi K3's real routed-expert shape (MXFP4 gate and up [3072, 3584], down
// [3584, 3072]: 17,547,264 bytes an expert), against the device's read ceiling measured in the
// same run over the same buffer. EXPERTS random experts live in VRAM (resident: no reads); each
// call routes n positions to top-16 of them, drawn afresh per run so a run's weights are not in
// L2 from the one before. Reports per n in {1, 5, 64}: the union's experts and bytes, the
// median time of RUNS calls (run_experts enqueued, then its fence waited for: the whole op,
// slot lists, the driver's batches and the combine included) and its weight bytes per second as a share of the ceiling.
//   cuda_expert_bench [RUNS=9] [EXPERTS=128]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "backend/backend.hpp"
#include "backend/scratch.hpp"
#include "backend/cuda/cuda_buffer.hpp"
#include "cuda_read_ceiling.hpp"
#include "model/expert_driver.hpp"

namespace {

using namespace deltafin;

constexpr int64_t kLatent = 3584, kWidth = 3072, kTopK = 16;
constexpr uint64_t kMatrix = kWidth * kLatent / 2, kScales = kWidth * kLatent / 32;  // one projection
constexpr uint64_t kExpert = 3 * (kMatrix + kScales);                               // 17,547,264

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Experts laid out back to back: per projection its E2M1 nibbles, then its E8M0 scales.
struct VramExperts final : ExpertSource {
  Buffer* buffer;
  int64_t count;
  Resident acquire(int32_t e) override {
    Resident r{{}, std::make_shared<int>(0)};
    const uint64_t base = static_cast<uint64_t>(e) * kExpert;
    for (int p = 0; p < 3; ++p) {
      const uint64_t at = base + p * (kMatrix + kScales);
      const int64_t rows = p < 2 ? kWidth : kLatent, cols = p < 2 ? kLatent : kWidth;
      r.proj[p] = {WeightFormat::MXFP4, rows, cols, buffer, at, buffer, at + kMatrix};
    }
    return r;
  }
  int64_t capacity() const override { return count; }
};

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 9;
  const int64_t experts = argc > 2 ? std::atoll(argv[2]) : 128;
  if (runs < 1 || experts < kTopK) {
    std::fprintf(stderr, "usage: cuda_expert_bench [RUNS >= 1] [EXPERTS >= 16]\n");
    return 1;
  }
  try {
    auto backend = make_cuda_backend(0);
    std::mt19937 rng(7);
    // Random nibbles; scales 2^-4..2^-2 (E8M0 123..125), so sums stay finite and normal.
    const uint64_t total = kExpert * experts;
    auto pool = backend->allocate(total);
    {
      std::vector<uint8_t> host(kExpert);
      std::uniform_int_distribution<int> byte(0, 255), scale(123, 125);
      for (int64_t e = 0; e < experts; ++e) {
        for (int p = 0; p < 3; ++p) {
          uint8_t* m = host.data() + p * (kMatrix + kScales);
          for (uint64_t i = 0; i < kMatrix; ++i) m[i] = static_cast<uint8_t>(byte(rng));
          for (uint64_t i = 0; i < kScales; ++i) m[kMatrix + i] = static_cast<uint8_t>(scale(rng));
        }
        backend->upload(host.data(), *pool, e * kExpert, kExpert);
      }
    }
    backend->wait(backend->commit());
    const std::byte* device = cuda::cuda_buffer(*pool, "pool").device();
    std::vector<double> ceiling;
    for (int r = 0; r < runs; ++r) ceiling.push_back(total / bench::read_seconds(device, total));
    const double read_gbs = median(ceiling) / 1e9;
    std::printf("read ceiling over the %.2f GB of experts: %.0f GB/s (median of %d)\n\n", total / 1e9, read_gbs, runs);
    std::printf("| positions | union experts | weight MB | median us | GB/s | of ceiling |\n|---|---|---|---|---|---|\n");

    VramExperts source;
    Scratch scratch(*backend);
    source.buffer = pool.get(), source.count = experts;
    const GatedActivation situ{GatedActivation::kSiTU, 4.0f, 25.0f};
    for (int64_t n : {1, 5, 64}) {
      std::vector<double> seconds;
      double unions = 0;
      auto x_buf = backend->allocate(4 * n * kLatent), out_buf = backend->allocate(4 * n * kLatent);
      auto id_buf = backend->allocate(4 * n * kTopK), w_buf = backend->allocate(4 * n * kTopK);
      const Tensor x = Tensor::of(*x_buf, n, kLatent), out = Tensor::of(*out_buf, n, kLatent);
      const Tensor ids = Tensor::of(*id_buf, n, kTopK, Elem::I32), weights = Tensor::of(*w_buf, n, kTopK);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> xs(n * kLatent), ws(n * kTopK, 1.0f / kTopK);
      for (float& v : xs) v = normal(rng);
      backend->upload(xs.data(), *x_buf, 0, xs.size() * 4);
      backend->upload(ws.data(), *w_buf, 0, ws.size() * 4);
      for (int r = -2; r < runs; ++r) {  // two warm-up calls
        std::vector<int32_t> chosen(n * kTopK);
        std::set<int32_t> all;
        std::vector<int32_t> perm(experts);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t e = 0; e < experts; ++e) perm[e] = static_cast<int32_t>(e);
          std::shuffle(perm.begin(), perm.end(), rng);
          std::sort(perm.begin(), perm.begin() + kTopK);
          std::copy(perm.begin(), perm.begin() + kTopK, chosen.begin() + t * kTopK);
          all.insert(perm.begin(), perm.begin() + kTopK);
        }
        const std::vector<int32_t> union_ids(all.begin(), all.end());
        backend->upload(chosen.data(), *id_buf, 0, chosen.size() * 4);
        backend->wait(backend->commit());
        const auto start = std::chrono::steady_clock::now();
        run_experts(*backend, scratch, source, x, ids, weights, union_ids, kWidth, situ, out);
        backend->wait(backend->commit());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (r < 0) continue;
        seconds.push_back(s / union_ids.size());  // per expert: unions differ from run to run
        unions += union_ids.size();
      }
      const double per_expert = median(seconds), mean_union = unions / runs;
      const double gbs = kExpert / per_expert / 1e9;
      std::printf("| %lld | %.1f | %.0f | %.1f | %.0f | %.0f %% |\n", static_cast<long long>(n), mean_union,
                  mean_union * kExpert / 1e6, per_expert * mean_union * 1e6, gbs, 100 * gbs / read_gbs);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_expert_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
