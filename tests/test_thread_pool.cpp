// ThreadPool (kernels/cpu/thread_pool.hpp): every index runs once, in chunks that depend only on
// n and the pool's size whatever the timing (so results are the same bits for any thread count),
// errors are rethrown, and (issue 41 item 5) a worker the OS does not run does not hold the
// caller up: parked in a signal handler, the caller runs every chunk itself. And the CPU
// backend's ops big enough to be shared (matmuls of 64 positions, attention over a long context,
// the output head) give the bundled model's logits the same bits at 1, 2 and 3 threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/thread_pool.hpp"
#include "test_util.hpp"

#if defined(__linux__)
#include <csignal>
#include <semaphore.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

using deltafin::cpu::ThreadPool;

TEST_CASE("ThreadPool covers every index exactly once", "[kernels][pool]") {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int64_t n : {0, 1, 2, 5, 7, 100, 1001}) {
      CAPTURE(threads, n);
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        ++calls;
        for (int64_t i = begin; i < end; ++i) ++hits[i];
      });
      bool once = true;
      for (auto& h : hits) once = once && h.load() == 1;
      CHECK(once);
      CHECK(calls.load() == (n > 0 ? pool.chunks(n) : 0));
      CHECK(pool.chunks(n) <= std::max<int64_t>(n, 1));
    }
  }
}

TEST_CASE("ThreadPool runs many jobs back to back and rethrows errors", "[kernels][pool]") {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 2000; ++job)
    pool.parallel_for(10, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    });
  CHECK(sum.load() == 2000 * 45);

  CHECK_THROWS_AS(pool.parallel_for(8,
                                    [](int64_t begin, int64_t) {
                                      if (begin >= 4) throw std::runtime_error("range failed");
                                    }),
                  std::runtime_error);
  std::atomic<int> after{0};
  pool.parallel_for(4, [&](int64_t begin, int64_t end) { after += static_cast<int>(end - begin); });
  CHECK(after.load() == 4);
}

TEST_CASE("ThreadPool chunks and results do not depend on timing or the thread count", "[kernels][pool][exactness]") {
  // Each index's value is a float sum whose order follows its range alone; random delays in
  // the chunks change which thread runs what, never the ranges or the bits.
  constexpr int64_t n = 257;
  auto value = [](int64_t i) {
    float s = 0.0f;
    for (int64_t j = 0; j <= i; ++j) s += std::sin(static_cast<float>(i * 31 + j)) * 1e-3f;
    return s;
  };
  std::vector<float> reference(n);
  for (int64_t i = 0; i < n; ++i) reference[i] = value(i);
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    std::set<std::pair<int64_t, int64_t>> first_ranges;
    for (int run = 0; run < 6; ++run) {
      CAPTURE(threads, run);
      std::vector<float> out(n);
      std::mutex mu;
      std::set<std::pair<int64_t, int64_t>> ranges;
      std::atomic<uint32_t> seed{static_cast<uint32_t>(run * 100 + threads)};
      pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        std::mt19937 rng(seed.fetch_add(1));
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        for (int64_t i = begin; i < end; ++i) out[i] = value(i);
        std::lock_guard lock(mu);
        ranges.insert({begin, end});
      });
      CHECK(std::memcmp(out.data(), reference.data(), n * sizeof(float)) == 0);
      CHECK(static_cast<int64_t>(ranges.size()) == pool.chunks(n));
      if (run == 0) first_ranges = ranges;
      CHECK(ranges == first_ranges);
    }
  }
}

TEST_CASE("the bundled model's logits are the same bits at 1, 2 and 3 threads over a long prompt", "[pool][exactness]") {
  std::string ids;
  for (int i = 0; i < 260; ++i) ids.append(i ? "," : "").append(std::to_string(5 + (i * 37) % 4000));
  const std::string model = deltafin::test::fixtures_dir() + "/../../models/default";
  std::vector<std::string> logits;
  for (int threads : {1, 2, 3}) {
    const auto out = std::filesystem::temp_directory_path() /
                     ("deltafin-pool-logits-" + std::to_string(::getpid()) + "-" + std::to_string(threads) + ".npy");
    const auto r = deltafin::test::run_deltafin("logits -m " + model + " --threads " + std::to_string(threads) +
                                                " --tokens " + ids + " --out " + out.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::ifstream in(out, std::ios::binary);
    logits.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    std::filesystem::remove(out);
  }
  REQUIRE(logits[0].size() > 260 * 4096 * 4);
  CHECK(logits[1] == logits[0]);
  CHECK(logits[2] == logits[0]);
}

#if defined(__linux__)
namespace {
sem_t g_release;                  // posted once per parked thread to let it go
std::atomic<int> g_parked{0};     // threads inside park_handler

void park_handler(int) {
  g_parked.fetch_add(1);
  while (sem_wait(&g_release) != 0) {
  }
  g_parked.fetch_sub(1);
}

// The ids of this process's threads.
std::set<long> thread_ids() {
  std::set<long> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ids.insert(std::stol(entry.path().filename().string()));
  return ids;
}

// Parks each thread of this process not in `before` in park_handler; returns how many.
int park_threads_since(const std::set<long>& before) {
  int count = 0;
  for (long tid : thread_ids())
    if (!before.count(tid) && syscall(SYS_tgkill, getpid(), tid, SIGUSR1) == 0) ++count;
  return count;
}
}  // namespace

TEST_CASE("ThreadPool does not wait for a worker the OS does not run", "[kernels][pool]") {
  // Issue 41 item 5: on a busy machine a worker is often descheduled between jobs. The old pool
  // handed each worker its own range, so every job waited until the OS ran that worker again
  // (here: until the watchdog lets it go, 3 s later). Now the caller runs the unclaimed chunks.
  REQUIRE(sem_init(&g_release, 0, 0) == 0);
  struct sigaction action {}, previous{};
  action.sa_handler = park_handler;
  sigemptyset(&action.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &action, &previous) == 0);
  {
    const std::set<long> before = thread_ids();
    ThreadPool pool(4);
    std::atomic<int64_t> warm{0};
    pool.parallel_for(100, [&](int64_t b, int64_t e) { warm += e - b; });  // the workers are up
    const int parked = park_threads_since(before);  // the pool's 3 workers
    REQUIRE(parked == 3);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (g_parked.load() < parked && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    REQUIRE(g_parked.load() == parked);
    std::thread watchdog([&] {  // lets the workers go after 3 s, so that a failing pool ends
      std::this_thread::sleep_for(std::chrono::seconds(3));
      for (int i = 0; i < parked; ++i) sem_post(&g_release);
    });

    const auto start = std::chrono::steady_clock::now();
    std::vector<int64_t> out(1000);
    for (int job = 0; job < 200; ++job)
      pool.parallel_for(1000, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] += i;
      });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < 1.0);  // 200 tiny jobs: milliseconds, not the watchdog's 3 s
    bool right = true;
    for (int64_t i = 0; i < 1000; ++i) right = right && out[i] == 200 * i;
    CHECK(right);

    watchdog.join();
    while (g_parked.load() > 0) std::this_thread::yield();
    std::atomic<int64_t> after{0};  // the released workers take part again
    for (int job = 0; job < 100; ++job) pool.parallel_for(1000, [&](int64_t b, int64_t e) { after += e - b; });
    CHECK(after.load() == 100 * 1000);
  }
  sigaction(SIGUSR1, &previous, nullptr);
  sem_destroy(&g_release);
}
#endif
