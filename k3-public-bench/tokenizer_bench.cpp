// Tokenizer encoding throughput: MB/s of a text file, median of several runs, one thread.
// Usage: tokenizer_bench TEXT_FILE RUNS SPEC...   where SPEC is one of
//   tiktoken:RANKS_FILE:o200k | tiktoken:RANKS_FILE:kimi | hf:TOKENIZER_JSON | dir:MODEL_DIR
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "text/hf_bpe_tokenizer.hpp"
#include "text/tiktoken_tokenizer.hpp"
#include "util/error.hpp"

using namespace deltafin;

namespace {

std::unique_ptr<Tokenizer> open_spec(const std::string& spec) {
  if (spec.rfind("hf:", 0) == 0) return load_hf_tokenizer(spec.substr(3));
  if (spec.rfind("dir:", 0) == 0) return load_tokenizer(spec.substr(4));
  if (spec.rfind("tiktoken:", 0) == 0) {
    const size_t colon = spec.rfind(':');
    const std::string path = spec.substr(9, colon - 9), pattern = spec.substr(colon + 1);
    return make_tiktoken_tokenizer(path, pattern == "kimi" ? kimi_split_pattern() : o200k_split_pattern(), {});
  }
  fail("unknown tokenizer spec '{}'", spec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: tokenizer_bench TEXT_FILE RUNS SPEC...\n");
    return 2;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) fail("{}: cannot open", argv[1]);
    const std::string text(std::istreambuf_iterator<char>(in), {});
    const int runs = std::max(1, std::atoi(argv[2]));
    std::printf("| tokenizer | MB | tokens | median MB/s | min | max |\n| --- | --- | --- | --- | --- | --- |\n");
    for (int a = 3; a < argc; ++a) {
      const auto tokenizer = open_spec(argv[a]);
      std::vector<double> rates;
      size_t tokens = 0;
      for (int r = 0; r < runs; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        tokens = tokenizer->encode(text, false).size();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rates.push_back(text.size() / 1e6 / s);
      }
      std::sort(rates.begin(), rates.end());
      std::printf("| %s | %.2f | %zu | %.1f | %.1f | %.1f |\n", argv[a], text.size() / 1e6, tokens,
                  rates[rates.size() / 2], rates.front(), rates.back());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
