// The CLI under hostile but realistic conditions (issue 12, items 3, 6, 7): directories and FIFOs
// where files are read, thread and memory limits, a full or vanished stdout, the context limit.
// Each ends in one line "deltafin: ..." and exit 1: never a crash with a core, never a hang, never
// lost output with exit 0.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <simdjson.h>

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
                     " exec timeout 60 " + deltafin::test::binary() + " " + args + "'");
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

TEST_CASE("worker threads that cannot start give one line suggesting --threads", "[bad-input][rlimit]") {
  // Threads take RLIMIT_STACK as their stack size: 2 GB of address space holds at most one 1 GB stack.
  expect_one_line(run_limited("ulimit -s 1000000; ulimit -v 2000000;", "run -p hi -n 2 --threads 4"),
                  {"cannot start 3 worker threads", "--threads"});
}

TEST_CASE("a tiny address-space limit gives one line, not a core", "[bad-input][rlimit]") {
  const auto r = run_limited("ulimit -v 100000;", "run -p hi -n 2");
  expect_one_line(r, {});
}

// dsv3_tiny with a vocabulary of `vocab`: lm_head and embed_tokens [vocab, 64] F32 are zeros in a
// hole of a sparse file, so the spine takes gigabytes of memory and no disk.
void make_huge_vocab_model(const ScratchModel& m, int64_t vocab) {
  const std::string bytes = m.read("model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  simdjson::dom::parser parser;
  simdjson::dom::object header = parser.parse(bytes.substr(8, n)).get_object();
  const uint64_t big = static_cast<uint64_t>(vocab) * 64 * 4;
  // The data region: the two big tensors first, then every other tensor in its old order.
  std::vector<std::pair<uint64_t, std::string_view>> rest;
  for (auto [key, value] : header)
    if (key != "__metadata__" && key != "lm_head.weight" && key != "model.embed_tokens.weight")
      rest.emplace_back(value["data_offsets"].at(0).get_uint64().value(), key);
  std::sort(rest.begin(), rest.end());
  std::string json = fmt::format(R"({{"lm_head.weight":{{"dtype":"F32","shape":[{0},64],"data_offsets":[0,{1}]}},)"
                                 R"("model.embed_tokens.weight":{{"dtype":"F32","shape":[{0},64],"data_offsets":[{1},{2}]}})",
                                 vocab, big, 2 * big);
  std::string data;
  for (const auto& [begin, key] : rest) {
    simdjson::dom::element t = header[key];
    const uint64_t end = t["data_offsets"].at(1).get_uint64().value();
    std::string shape;
    for (simdjson::dom::element d : t["shape"].get_array()) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d.get_int64().value());
    }
    json += fmt::format(R"(,"{}":{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})", key, t["dtype"].get_string().value(),
                        shape, 2 * big + data.size(), 2 * big + data.size() + end - begin);
    data += bytes.substr(8 + n + begin, end - begin);
  }
  json += "}";
  const std::string path = (m.dir / "model.safetensors").string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const uint64_t len = json.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << json;
  }
  fs::resize_file(path, 8 + json.size() + 2 * big);  // the hole
  std::ofstream(path, std::ios::binary | std::ios::app) << data;
  std::string config = m.read("config.json");
  const size_t at = config.find("\"vocab_size\": 288");
  REQUIRE(at != std::string::npos);
  m.write("config.json", config.replace(at, 17, fmt::format("\"vocab_size\": {}", vocab)));
}

// Issue 12, item 8: running out of memory names what was being allocated.
TEST_CASE("a spine tensor that cannot be allocated is named", "[bad-input][rlimit]") {
  ScratchModel m("dsv3_tiny");
  make_huge_vocab_model(m, 400);  // first: the same model stays loadable at a small vocabulary
  CHECK(run_deltafin("run -m " + m.dir.string() + " --tokens 1,2 --ids -n 1").exit_code == 0);
  ScratchModel huge("dsv3_tiny");
  make_huge_vocab_model(huge, 100'000'000);  // 25.6 GB per tensor
  const auto r = run_limited("ulimit -v 4000000; DELTAFIN_MEMORY_GB=1000",
                             "run -m " + huge.dir.string() + " --tokens 1,2 --ids -n 1 --threads 2");
  expect_one_line(r, {"out of memory loading the spine: tensor 'model.embed_tokens.weight' needs 25.600 GB"});
}

// Issue 12, item 6: output that does not reach stdout is an error.
TEST_CASE("a full stdout is an error naming stdout", "[bad-input]") {
  const std::string bin = std::string("DELTAFIN_SIMD=") + deltafin::cpu::simd_current() + " " + deltafin::test::binary();
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
                             deltafin::test::binary() + " run -p def -n 20000 --ignore-eos --past-context 2>" + err.string() +
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

// Issues 12 (item 8) and 16: the spine, the KV cache for the planned positions, a draft model and
// the expert share live in one budget, by default the memory the machine (and its cgroup) has
// free; DELTAFIN_MEMORY_GB stands in for that figure here (without headroom). The bundled model:
// spine 9.8 MB, all its experts 17.7 MB, working memory 32 MB; its dense draft holds 10.3 MB
// beside it (spine 8.2 MB).
TEST_CASE("a budget below the minimum working set, or a --cache-gb that does not fit, is refused, and a default budget is shared", "[bad-input]") {
  const std::string simd = "DELTAFIN_SIMD=" + deltafin::cpu::simd_current() + " ";
  const auto run = [&](const std::string& env, const std::string& args) {
    return run_command(env + " " + simd + deltafin::test::binary() + " " + args);
  };
  expect_one_line(run("DELTAFIN_MEMORY_GB=0.03", "run -p def -n 2 --ids"),
                  {"default-draft: the default memory budget of 30.0 MB (DELTAFIN_MEMORY_GB): below the minimum working set of 34.1 MB",
                   "give at least --memory-gb 0.0342"});
  expect_one_line(run("DELTAFIN_MEMORY_GB=0.06", "run -p def -n 2 --ids --cache-gb 0.03"),
                  {"--cache-gb 0.03 leaves 0 B for the spine", "10.3 MB for the draft model", "at most --cache-gb 0.0155"});
  expect_one_line(run("DELTAFIN_MEMORY_GB=lots", "run -p def -n 2 --ids"), {"DELTAFIN_MEMORY_GB=lots"});
  // Tight but above the minimum: the spine streams and the experts take what is left.
  const auto shared = run("DELTAFIN_MEMORY_GB=0.045", "run -p def -n 2 --ids --stats=full");
  INFO(shared.output);
  CHECK(shared.exit_code == 0);
  CHECK(shared.output.find("budget    0.0450 GB (DELTAFIN_MEMORY_GB): spine 0.0000 GB resident + 0.0098 GB streamed") !=
        std::string::npos);
  // A budget above what every expert takes at once is never used: it fits wherever the experts do.
  CHECK(run("DELTAFIN_MEMORY_GB=0.1", "run -p def -n 2 --ids --cache-gb 50").exit_code == 0);
  // The KV cache of the planned positions (prompt + -n) is part of the budget.
  expect_one_line(run("DELTAFIN_MEMORY_GB=0.06", "run -p def -n 8000 --ids"),
                  {"models/default: the default memory budget of 60.0 MB (DELTAFIN_MEMORY_GB): below the minimum working set",
                   "15.4 MB of KV cache and state"});
}

// Issue 12, item 8: a draft model's experts live in the one budget (they had 1 GB of their own).
TEST_CASE("a draft model with experts takes its share of the one expert budget", "[bad-input]") {
  const std::string model = deltafin::test::fixture("k2_tiny");
  const fs::path json = fs::temp_directory_path() / ("deltafin-share-" + std::to_string(::getpid()) + ".json");
  const auto budget = [&](const std::string& extra) {
    const auto r = run_deltafin("run -m " + model + " --tokens 1,2,3 -n 4 --ids --placement none --stats-json " +
                                json.string() + extra);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::ifstream in(json);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find("\"budget\": ");
    REQUIRE(at != std::string::npos);
    return std::stoull(text.substr(at + 10));
  };
  const uint64_t all = budget("");  // a default budget is trimmed to every expert at once
  const uint64_t given = all / 2;
  const double gb = static_cast<double>(given) / 1e9;
  const uint64_t target = budget(fmt::format(" --cache-gb {:.12f} --draft model --draft-model {}", gb, model));
  const uint64_t asked = static_cast<uint64_t>(gb * 1e9);
  CHECK(target == asked - static_cast<uint64_t>(gb / 4 * 1e9));  // the draft took a quarter
  CHECK(budget(fmt::format(" --cache-gb {:.12f}", gb)) == asked);
  fs::remove(json);
}

TEST_CASE("stop strings apply to --ids output, and -n past 10^12 is refused", "[bad-input]") {
  const auto all = run_deltafin("run -p 'def f(x):' -n 30 --ids --ignore-eos");
  const auto stopped = run_deltafin("run -p 'def f(x):' -n 30 --ids --ignore-eos --stop return");
  INFO(all.output << "\n" << stopped.output);
  REQUIRE(all.exit_code == 0);
  REQUIRE(stopped.exit_code == 0);
  CHECK(stopped.output.size() < all.output.size());
  CHECK(all.output.rfind(stopped.output.substr(0, stopped.output.size() - 1), 0) == 0);  // a prefix (less its newline)
  expect_one_line(run_deltafin("run -p def -n 99999999999999999999 --ids"), {"-n: too large"});
}

// Issue 41, item 3: a DELTAFIN_MODEL that names no model is an error naming it, never the bundled
// model in its place.
TEST_CASE("a DELTAFIN_MODEL that is not a model directory is refused, naming the variable", "[bad-input]") {
  const std::string missing = (fs::temp_directory_path() / "deltafin-no-such-model").string();
  const std::string empty_dir = fs::temp_directory_path().string();
  const auto run = [](const std::string& model) {
    return run_command("DELTAFIN_MODEL='" + model + "' DELTAFIN_SIMD=" + deltafin::cpu::simd_current() + " " +
                       deltafin::test::binary() + " run -p def -n 2 --ids");
  };
  expect_one_line(run(missing), {"DELTAFIN_MODEL=" + missing, "no such directory"});
  expect_one_line(run(empty_dir), {"DELTAFIN_MODEL=" + empty_dir, "no config.json"});
  const auto bundled = run(deltafin::test::fixture("../../models/default"));  // a real model is taken
  INFO(bundled.output);
  CHECK(bundled.exit_code == 0);
}

// Issue 33, items 4 and 9: an explicit --memory-gb is compared with what the machine can give
// (DELTAFIN_MEMORY_GB stands in for that figure here); --threads and --temp have sane bounds.
TEST_CASE("refused: a --memory-gb past the machine's room, --threads past 4 a core, --temp inf", "[bad-input]") {
  const std::string simd = "DELTAFIN_SIMD=" + deltafin::cpu::simd_current() + " ";
  expect_one_line(run_command("DELTAFIN_MEMORY_GB=0.05 " + simd + deltafin::test::binary() + " run -p def -n 2 --ids --memory-gb 1"),
                  {"--memory-gb 1: more than this machine can give this process (50.0 MB available: DELTAFIN_MEMORY_GB)",
                   "give at most --memory-gb 0.05"});
  expect_one_line(run_deltafin("run -p def -n 2 --ids --memory-gb 1e9"), {"--memory-gb 1000000000: more than this machine can give"});
  expect_one_line(run_deltafin("run -p def -n 2 --ids --threads 100000"), {"--threads 100000: more than 4 per hardware thread"});
  expect_one_line(run_deltafin("run -p def -n 2 --ids --temp inf"), {"--temp: must be a finite number >= 0 (got inf)"});
}
