// A drive's read ceiling without fio, through the engine's own reader: DEPTH threads, each reading
// PIECE_BYTES pieces at random 4096-aligned offsets of FILE with ReadOnlyFile::read_uncached
// (O_DIRECT on Linux where the filesystem allows it, F_NOCACHE on macOS) into an aligned buffer,
// for SECONDS after one second of ramp-up — the access pattern fio-ceiling.sh gives fio. Prints
// the bytes read per second over the measured span. fio-ceiling.sh runs it when fio is missing.
// Usage: read_ceiling_bench FILE PIECE_BYTES DEPTH SECONDS
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "util/aligned_buffer.hpp"
#include "util/read_only_file.hpp"

using namespace deltafin;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: read_ceiling_bench FILE PIECE_BYTES DEPTH SECONDS\n");
    return 2;
  }
  try {
    const ReadOnlyFile file(argv[1]);
    const uint64_t piece = std::strtoull(argv[2], nullptr, 10);
    const int depth = std::atoi(argv[3]);
    const double seconds = std::atof(argv[4]);
    if (piece == 0 || piece % AlignedBuffer::kAlignment != 0 || depth < 1 || seconds <= 0 || file.size() < piece) {
      std::fprintf(stderr, "read_ceiling_bench: PIECE_BYTES must be a multiple of 4096 no larger than the file, "
                           "DEPTH and SECONDS positive\n");
      return 2;
    }
    using Clock = std::chrono::steady_clock;
    const uint64_t slots = (file.size() - piece) / AlignedBuffer::kAlignment + 1;  // aligned start offsets
    const Clock::time_point start = Clock::now() + std::chrono::seconds(1);
    const Clock::time_point stop = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::atomic<uint64_t> measured{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < depth; ++t)
      threads.emplace_back([&, t] {
        AlignedBuffer buffer(piece);
        std::mt19937_64 rng(1234 + t);
        std::uniform_int_distribution<uint64_t> slot(0, slots - 1);
        uint64_t bytes = 0;
        for (Clock::time_point now = Clock::now(); now < stop;) {
          file.read_uncached(buffer.data(), piece, slot(rng) * AlignedBuffer::kAlignment);
          now = Clock::now();
          if (now >= start && now < stop) bytes += piece;  // counted when it completed inside the window
        }
        measured += bytes;
      });
    for (std::thread& t : threads) t.join();
    std::printf("%.0f\n", measured.load() / seconds);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "read_ceiling_bench: %s\n", e.what());
    return 1;
  }
}
