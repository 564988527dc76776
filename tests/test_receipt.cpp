// The receipt (`run --stats`, `--stats=full`, `--stats-json`), issue 41: tokens are tokens under
// speculation (a pass that commits several counts them all; passes are reported apart), the
// default receipt is the short block a user reads (prompt and answer speed, time to first token,
// speculation in words, disk reads, memory held), the engine's counters come with --stats=full,
// and --help shows no CLI11 internals.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "test_util.hpp"

namespace fs = std::filesystem;
namespace test = deltafin::test;

namespace {

struct Run {
  int exit_code = -1;
  std::string out, err;
  std::string json;  // the --stats-json file's text
};

// `deltafin run ARGS --stats-json FILE`, stdout and stderr apart.
Run run_with_stats(const std::string& args) {
  static int counter = 0;
  const fs::path dir = fs::temp_directory_path() / ("deltafin-receipt-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(counter++));
  fs::create_directories(dir);
  // In a subshell: run_command sends the command's stderr to its stdout.
  const auto r = test::run_command("(DELTAFIN_SIMD=" + deltafin::cpu::simd_current() + " " + test::binary() + " run " +
                                   args + " --stats-json " + (dir / "stats.json").string() + " > " + (dir / "out").string() +
                                   " 2> " + (dir / "err").string() + ")");
  const auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  Run run{r.exit_code, slurp(dir / "out"), slurp(dir / "err"), slurp(dir / "stats.json")};
  fs::remove_all(dir);
  return run;
}

int64_t count_ids(const std::string& ids) {
  std::istringstream in(ids);
  int64_t n = 0;
  for (int64_t id; in >> id;) ++n;
  return n;
}

int64_t integer(const simdjson::dom::element& object, const char* key) {
  return static_cast<int64_t>(object[key].get_uint64().value());
}

bool has_line(const std::string& text, const std::string& start) {
  return text.rfind(start, 0) == 0 || text.find("\n" + start) != std::string::npos;
}

}  // namespace

TEST_CASE("under speculation the receipt counts the tokens produced, and the target passes apart", "[receipt][speculative]") {
  // The bundled model with its bundled draft, drafting on every pass: a pass commits several tokens.
  const Run r = run_with_stats("-p 'def parse_args(argv):' -n 64 --ignore-eos --ids --draft auto --no-adaptive --stats");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const int64_t generated = count_ids(r.out);
  REQUIRE(generated == 64);
  simdjson::dom::parser parser;
  const simdjson::dom::element stats = parser.parse(r.json);
  const simdjson::dom::element decode = stats["decode"], speculative = stats["speculative"];
  // The first token comes from the prompt's pass; the decode produced the other 63.
  CHECK(integer(decode, "tokens") == generated - 1);
  CHECK(static_cast<int64_t>(stats["ids"].get_array().size()) == generated);
  const int64_t passes = integer(decode, "passes");
  CHECK(passes == integer(speculative, "steps"));
  CHECK(integer(speculative, "accepted") > 0);
  CHECK(passes < integer(decode, "tokens"));  // the bug: passes were reported as tokens
  // The text receipt says the same in words.
  CHECK(has_line(r.err, "answer    64 tokens at "));
  CHECK(std::regex_search(r.err, std::regex(R"(\ndraft     the draft model guessed \d+ tokens, \d+ accepted: [0-9.]+ tokens per pass of the model)")));
}

TEST_CASE("without speculation decode tokens and passes agree", "[receipt]") {
  const Run r = run_with_stats("-p 'def f(x):' -n 12 --ignore-eos --ids --draft off");
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser parser;
  const simdjson::dom::element decode = parser.parse(r.json)["decode"];
  CHECK(integer(decode, "tokens") == 11);
  CHECK(integer(decode, "passes") == 11);
  CHECK(decode["first_token_seconds"].get_double().value() > 0);
}

TEST_CASE("the default receipt is the user's block, and --stats=full adds the engine's counters", "[receipt]") {
  const Run r = run_with_stats("-p 'def f(x):' -n 16 --ignore-eos --stats");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.rfind("--- deltafin receipt (--stats=full: every counter) ---\nmodel     ", 0) == 0);
  CHECK(std::regex_search(r.err, std::regex(R"(\nprompt    \d+ tokens in [0-9.]+ m?s: [0-9.]+ tok/s; 1 pass of at most \d+ positions; )"
                                            R"(experts read 1\.00x the [0-9.]+ [KMG]?B it routed to\n)")));
  CHECK(std::regex_search(r.err, std::regex(R"(\nanswer    16 tokens at [0-9.]+ tok/s; first token after [0-9.]+ m?s\n)")));
  CHECK(std::regex_search(r.err, std::regex(R"(\ndisk      [0-9.]+ [KMG]?B read at [0-9.]+ [KMG]?B/s\n)")));
  CHECK(std::regex_search(r.err, std::regex(R"(\nmemory    peak [0-9.]+ [KMG]?B, budget [0-9.]+ [KMG]?B \([^)]*\): held\n)")));
  CHECK(has_line(r.err, "draft     "));  // the bundled draft is on by default
  // No engineer's lines, no GB to four decimals.
  for (const char* hidden : {"overlap ", "budget ", "ids hash", "experts ", "rss "}) CHECK(!has_line(r.err, hidden));
  CHECK(!std::regex_search(r.err, std::regex(R"(\d\.\d{4} GB)")));

  const Run full = run_with_stats("-p 'def f(x):' -n 16 --ignore-eos --stats=full");
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  CHECK(full.out == r.out);
  for (const char* line : {"prompt ", "answer ", "disk ", "memory ", "--- engine counters ---", "prefill ", "decode ",
                           "experts ", "guesses ", "overlap ", "rss ", "budget ", "spine ", "ids hash "})
    CHECK(has_line(full.err, line));
  CHECK(full.err.find("target passes") != std::string::npos);
  CHECK(full.err.find("routing choices ran as") != std::string::npos);  // not "runs for selections"
  CHECK(full.err.find("shadow") == std::string::npos);

  const auto bad = test::run_deltafin("run -p x -n 1 --stats=everything");
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("--stats or --stats=full") != std::string::npos);
  CHECK(std::count(bad.output.begin(), bad.output.end(), '\n') == 1);
}

TEST_CASE("speculation that turned itself off is said in words", "[receipt][speculative]") {
  // A draft model of random weights guesses wrong: measured on the side, its guesses never pay.
  const Run r = run_with_stats("-m " + test::fixture("k2_tiny") + " --tokens 5,17,99,4 -n 48 --ignore-eos --ids --draft model "
                               "--draft-model " + test::fixture("k3_tiny") + " --stats");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(std::regex_search(r.err, std::regex(R"(\ndraft     speculation turned itself off: the draft model's guesses, checked on the side, were right \d+ of \d+ times)")));
  simdjson::dom::parser parser;
  const simdjson::dom::element speculative = parser.parse(r.json)["speculative"];
  CHECK(speculative["off"].get_bool().value());
  CHECK(integer(speculative, "drafted") == 0);
  CHECK(integer(speculative, "shadow_guesses") > 0);
}

TEST_CASE("the --help of every command shows no CLI11 internals", "[receipt][cli]") {
  for (const char* command : {"run", "serve", "logits", "inspect", "tokenize", "detokenize", "place", "verify",
                              "metal-selftest"}) {
    const auto r = test::run_deltafin(std::string(command) + " --help");
    INFO(command << "\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("{false}") == std::string::npos);
    CHECK(r.output.find("{true}") == std::string::npos);
    CHECK(!std::regex_search(r.output, std::regex(R"(--[a-z-]+\{)")));
  }
  CHECK(test::run_deltafin("run --help").output.find("--no-bypass ") != std::string::npos);
}
