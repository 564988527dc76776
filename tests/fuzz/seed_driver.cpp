// A main() for a libFuzzer target in the default build (tests/fuzz/targets.cmake): runs the
// target's entry point once over each seed file in the directories given, so the default suite
// builds every fuzz target with its sources and runs its seeds (a target that stops building, or
// a seed that now traps, fails a test instead of going unnoticed until someone fuzzes).
// Usage: fuzz_seeds_NAME DIR...   Exit 0 when every seed ran (and there was one); a finding traps.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> seeds;
  for (int i = 1; i < argc; ++i)
    for (const auto& entry : std::filesystem::directory_iterator(argv[i]))
      if (entry.is_regular_file()) seeds.push_back(entry.path());
  std::sort(seeds.begin(), seeds.end());
  for (const auto& seed : seeds) {
    std::ifstream in(seed, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%zu seeds ran\n", seeds.size());
  return seeds.empty() ? 1 : 0;
}
