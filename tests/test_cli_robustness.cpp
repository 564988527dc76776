// The CLI under hostile but realistic conditions (issue 12, items 3, 6, 7): directories and FIFOs
// where files are read, thread and memory limits, a full or vanished stdout, the context limit.
// Each ends in one line "deltafin: ..." and exit 1: never a crash with a core, never a hang, never
// lost output with exit 0.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace fs = std::filesystem;
using deltafin::test::run_command;
using deltafin::test::run_deltafin;
using deltafin::test::ScratchModel;

namespace {

// A private scratch directory with a FIFO in it (no writer: opening it would block forever).
struct FifoDir {
  fs::path dir = fs::temp_directory_path() / ("deltafin-fifo-" + std::to_string(::getpid()));
  fs::path fifo = dir / "fifo";
  FifoDir() {
    fs::create_directories(dir);
    fs::remove(fifo);
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  }
  ~FifoDir() { fs::remove_all(dir); }
};

void expect_one_line(const deltafin::test::CommandResult& r, const std::vector<std::string>& must_contain) {
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("deltafin: ", 0) == 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  for (const std::string& s : must_contain) CHECK(r.output.find(s) != std::string::npos);
}

// deltafin under `timeout` (a hang fails the test instead of stalling the suite) and a shell
// prefix (ulimit), on the SIMD target the test process dispatches to.
deltafin::test::CommandResult run_limited(const std::string& shell_prefix, const std::string& args) {
  return run_command("bash -c '" + shell_prefix + " DELTAFIN_SIMD=" + deltafin::cpu::simd_current() +
                     " exec timeout 60 " + DELTAFIN_BINARY + " " + args + "'");
}

}  // namespace

TEST_CASE("a directory given as an input file is refused in one line", "[bad-input]") {
  const std::string dir = fs::temp_directory_path().string();
  expect_one_line(run_deltafin("run -f " + dir), {dir, "prompt file (-f)", "is a directory"});
  expect_one_line(run_deltafin("run -p hi --placement " + dir), {dir, "placement manifest", "is a directory"});
}

TEST_CASE("a FIFO given as an input file is refused, not waited on", "[bad-input]") {
  FifoDir f;
  expect_one_line(run_limited("", "run -f " + f.fifo.string()), {f.fifo.string(), "is a FIFO"});
  expect_one_line(run_limited("", "run -p hi --placement " + f.fifo.string()), {f.fifo.string(), "is a FIFO"});
  // Inside a model directory: config.json as a FIFO.
  ScratchModel m("dsv3_tiny");
  fs::remove(m.dir / "config.json");
  REQUIRE(::mkfifo((m.dir / "config.json").c_str(), 0600) == 0);
  expect_one_line(run_limited("", "logits -m " + m.dir.string() + " --tokens 1,2 --out " + (f.dir / "o.npy").string()),
                  {"config.json", "is a FIFO"});
}

TEST_CASE("worker threads that cannot start give one line suggesting --threads", "[bad-input]") {
  // 2 GB of address space holds a few hundred 8 MB thread stacks, not a thousand.
  expect_one_line(run_limited("ulimit -v 2000000;", "run -p hi -n 2 --threads 1000"),
                  {"cannot start 999 worker threads", "--threads"});
}

TEST_CASE("a tiny address-space limit gives one line, not a core", "[bad-input]") {
  const auto r = run_limited("ulimit -v 100000;", "run -p hi -n 2");
  expect_one_line(r, {});
}

// Issue 12, item 6: output that does not reach stdout is an error.
TEST_CASE("a full stdout is an error naming stdout", "[bad-input]") {
  const std::string bin = std::string("DELTAFIN_SIMD=") + deltafin::cpu::simd_current() + " " + DELTAFIN_BINARY;
  for (const std::string& command : {bin + " run -p def -n 8", bin + " inspect", "echo hello | " + bin + " tokenize"}) {
    CAPTURE(command);
    // stderr to the captured pipe, stdout to the full device
    expect_one_line(run_command("bash -c '" + command + " 2>&1 >/dev/full'"), {"stdout: No space left on device"});
  }
}

TEST_CASE("with SIGPIPE ignored, run stops when its reader goes away", "[bad-input]") {
  const fs::path err = fs::temp_directory_path() / ("deltafin-epipe-" + std::to_string(::getpid()));
  // 20,000 tokens would take half a minute; the reader leaves after 10 bytes.
  const auto r = run_command("bash -c 'trap \"\" PIPE; DELTAFIN_SIMD=" + deltafin::cpu::simd_current() + " timeout 60 " +
                             DELTAFIN_BINARY + " run -p def -n 20000 --ignore-eos --past-context 2>" + err.string() +
                             " | head -c 10 >/dev/null; exit ${PIPESTATUS[0]}'");
  const auto message = run_command("cat " + err.string());
  fs::remove(err);
  INFO(message.output);
  CHECK(r.exit_code == 1);
  CHECK(message.output == "deltafin: stdout: Broken pipe\n");
}

// Issue 12, item 7: the model's context is a limit unless the user lifts it.
TEST_CASE("a prompt and -n past the model's context are refused in one line", "[bad-input]") {
  expect_one_line(run_deltafin("run -p def -n 20000"),
                  {"-n 20000 need 20001 positions", "context of 16384 (max_position_embeddings)", "--past-context"});
  const auto r = run_deltafin("run -p def -n 4 --ignore-eos --ids");  // inside the context: runs
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

// Issue 12, item 10 (flags): out-of-range values are refused in one line, and CLI11's own parse
// errors end like every other error (exit 1, not 104-114).
TEST_CASE("out-of-range and malformed flags give one line and exit 1", "[bad-input]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run -p def -n 2 --cache-gb nan", "--cache-gb must be"},
      {"run -p def -n 2 --cache-gb inf", "--cache-gb must be"},
      {"run -p def -n 2 --threads -5", "--threads must be >= 0"},
      {"run -p def -n 2 --draft-k -3", "--draft-k must be 0..16"},
      {"run -p def -n 2 --draft-k 1000", "--draft-k must be 0..16"},
      {"run -p def -n 2 --seed -1", "--seed"},
      {"run -p def -n 2 --no-such-flag", "no-such-flag"},
      {"run -p def -n two", "-n"},
      {"frobnicate", "unknown command 'frobnicate' (commands: run, logits"},
  };
  for (const auto& [args, needle] : cases) {
    CAPTURE(args);
    expect_one_line(run_deltafin(args), {needle});
  }
  const auto help = run_deltafin("run --help");
  CHECK(help.exit_code == 0);
}

TEST_CASE("a model path (-m) naming a file or nothing says so", "[bad-input]") {
  expect_one_line(run_deltafin("run -m /nonexistent-model -p def -n 2"), {"-m /nonexistent-model: no such directory"});
  const std::string file = deltafin::test::fixture("dsv3_tiny") + "/config.json";
  expect_one_line(run_deltafin("run -m " + file + " -p def -n 2"), {file, "not a directory"});
}

TEST_CASE("an eos_token_id outside the vocabulary is refused", "[bad-input]") {
  ScratchModel m("dsv3_tiny");
  m.set_config("eos_token_id", "999999");
  expect_one_line(run_deltafin("run -m " + m.dir.string() + " --tokens 1 -n 2 --ids"),
                  {"config.json", "eos_token_id 999999 is outside the vocabulary"});
}

// Issue 12, item 8: the spine and the expert budget are compared with the memory the machine (and
// its cgroup) has free; DELTAFIN_MEMORY_GB stands in for that figure here.
TEST_CASE("memory that cannot hold the spine, or a --cache-gb that does not fit, is refused; a default budget is lowered", "[bad-input]") {
  const std::string simd = "DELTAFIN_SIMD=" + deltafin::cpu::simd_current() + " ";
  const auto run = [&](const std::string& env, const std::string& args) {
    return run_command(env + " " + simd + DELTAFIN_BINARY + " " + args);
  };
  expect_one_line(run("DELTAFIN_MEMORY_GB=0.03", "run -p def -n 2 --ids"),
                  {"spine", "do not fit in the 0.03 GB free (DELTAFIN_MEMORY_GB)"});
  expect_one_line(run("DELTAFIN_MEMORY_GB=1", "run -p def -n 2 --ids --cache-gb 2"), {"--cache-gb 2", "at most --cache-gb 0.9"});
  expect_one_line(run("DELTAFIN_MEMORY_GB=lots", "run -p def -n 2 --ids"), {"DELTAFIN_MEMORY_GB=lots"});
  const auto lowered = run("DELTAFIN_MEMORY_GB=1", "run -p def -n 2 --ids --stats");
  INFO(lowered.output);
  CHECK(lowered.exit_code == 0);
  CHECK(lowered.output.find("expert budget lowered from 4.00 GB to 0.9") != std::string::npos);
  CHECK(lowered.output.find("(budget 0.9") != std::string::npos);
}

TEST_CASE("stop strings apply to --ids output; -n past 10^12 is refused", "[bad-input]") {
  const auto all = run_deltafin("run -p 'def f(x):' -n 30 --ids --ignore-eos");
  const auto stopped = run_deltafin("run -p 'def f(x):' -n 30 --ids --ignore-eos --stop return");
  INFO(all.output << "\n" << stopped.output);
  REQUIRE(all.exit_code == 0);
  REQUIRE(stopped.exit_code == 0);
  CHECK(stopped.output.size() < all.output.size());
  CHECK(all.output.rfind(stopped.output.substr(0, stopped.output.size() - 1), 0) == 0);  // a prefix (less its newline)
  expect_one_line(run_deltafin("run -p def -n 99999999999999999999 --ids"), {"-n: too large"});
}
