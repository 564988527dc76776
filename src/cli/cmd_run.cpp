// `deltafin run -m DIR --tokens 1,17,300 -n 24 --temp 0 --ids`: prefill the prompt, then decode
// up to -n tokens one position at a time, printing the generated ids on one line.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include "cli/commands.hpp"
#include "decode/sampler.hpp"
#include "util/error.hpp"

namespace deltafin::cli {

Command register_run(CLI::App& app) {
  struct Flags {
    EngineOptions engine;
    std::string tokens;
    int64_t max_new = 64;
    float temp = 0.0f;
    uint64_t seed = 0;
    bool ids = false, stats = false, ignore_eos = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand("run", "Generate a continuation of a prompt");
  add_engine_flags(*sub, flags->engine);
  sub->add_option("--tokens", flags->tokens, "Prompt as comma-separated token ids")->required();
  sub->add_option("-n,--max-new-tokens", flags->max_new, "New tokens at most")->capture_default_str();
  sub->add_option("--temp", flags->temp, "Sampling temperature (0: greedy)")->capture_default_str();
  sub->add_option("--seed", flags->seed, "Seed of the sampler")->capture_default_str();
  sub->add_flag("--ids", flags->ids, "Print generated token ids, space-separated, on one line");
  sub->add_flag("--ignore-eos", flags->ignore_eos, "Do not stop at the end-of-sequence token");
  sub->add_flag("--stats", flags->stats, "Print the receipt to stderr");
  return {sub, [flags] {
            using Clock = std::chrono::steady_clock;
            const std::vector<int32_t> prompt = parse_token_list(flags->tokens, "--tokens");
            if (flags->max_new < 0) fail("-n: must be >= 0 (got {})", flags->max_new);
            if (!(flags->temp >= 0.0f)) fail("--temp: must be >= 0 (got {})", flags->temp);
            if (!flags->ids) fail("run: only --ids output is available until the tokenizer stage");
            auto engine = Engine::open(flags->engine);
            auto session = engine->new_session();
            Sampler sampler(flags->temp, flags->seed);
            const int64_t eos = flags->ignore_eos ? -1 : engine->summary().eos_token_id;

            const auto t0 = Clock::now();
            std::vector<float> logits = prompt.empty() ? std::vector<float>() : session->append(prompt, false);
            const auto t1 = Clock::now();
            std::vector<int32_t> generated;
            while (static_cast<int64_t>(generated.size()) < flags->max_new && !logits.empty()) {
              const int32_t next = sampler.sample(logits);
              generated.push_back(next);
              std::printf("%s%d", generated.size() > 1 ? " " : "", next);
              std::fflush(stdout);
              if (next == eos || static_cast<int64_t>(generated.size()) == flags->max_new) break;
              logits = session->append(std::span<const int32_t>(&next, 1), false);
            }
            std::printf("\n");
            std::fflush(stdout);
            const auto t2 = Clock::now();
            if (flags->stats)
              print_receipt(*engine, std::chrono::duration<double>(t1 - t0).count(), static_cast<int64_t>(prompt.size()),
                            std::chrono::duration<double>(t2 - t1).count(), static_cast<int64_t>(generated.size()),
                            generated);
            return 0;
          }};
}

}  // namespace deltafin::cli
