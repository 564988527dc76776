// `deltafin run` with text end to end on the k2_tiny fixture (random weights, a tiny Kimi-format
// tokenizer): stdin, -p and -f agree (one trailing newline dropped from each); output is the UTF-8-safe decoding of the generated ids;
// --chat uses the K2 template; bad prompts give clear errors; Ctrl-C stops cleanly with a receipt.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <utility>
#include <vector>
#include <unistd.h>

#include "test_util.hpp"
#include "text/utf8_stream.hpp"

namespace fs = std::filesystem;
using deltafin::test::run_deltafin;
namespace test = deltafin::test;
namespace cpu = deltafin::cpu;

namespace {

const std::string kModel = deltafin::test::fixture("k2_tiny");

std::string stdout_of(const std::string& args, const std::string& producer = "") {
  const std::string cmd = (producer.empty() ? "" : producer + " | ") + deltafin::test::binary() + " " + args + " 2>/dev/null";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

// `producer | deltafin args`, stdout only.
std::string piped(const std::string& producer, const std::string& args) {
  return stdout_of(args, producer);
}

fs::path temp_file(const std::string& name, const std::string& bytes) {
  const fs::path p = fs::temp_directory_path() / ("deltafin-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

}  // namespace

TEST_CASE("a piped prompt (echo def f(x): | deltafin run -m DIR -n 16) streams the decoded ids", "[cli-text]") {
  const std::string text = piped("echo 'def f(x):'", "run -m " + kModel + " -n 16 --ignore-eos");
  const std::string ids = piped("printf '%s' 'def f(x):'", "tokenize -m " + kModel);
  REQUIRE(!ids.empty());
  std::string prompt_ids = ids.substr(0, ids.size() - 1);
  std::replace(prompt_ids.begin(), prompt_ids.end(), ' ', ',');
  const std::string generated = stdout_of("run -m " + kModel + " --tokens " + prompt_ids + " -n 16 --ids --ignore-eos");
  REQUIRE(std::count(generated.begin(), generated.end(), ' ') == 15);
  const std::string decoded = piped("echo '" + generated + "'", "detokenize -m " + kModel);
  // The streamed text equals the decoded ids with invalid UTF-8 replaced (Utf8Stream's replacement
  // rule is checked against Python's in test_text_pipeline.cpp).
  deltafin::Utf8Stream utf8;
  std::string expected = utf8.push(decoded);
  expected += utf8.finish();
  INFO("ids: " << generated);
  CHECK(text.size() > 1);
  CHECK(text == expected + "\n");
  CHECK(stdout_of("run -m " + kModel + " -p 'def f(x):' -n 16 --ignore-eos") == text);
  CHECK(stdout_of("run -m " + kModel + " -f " + temp_file("prompt.txt", "def f(x):").string() + " -n 16 --ignore-eos") == text);
}

TEST_CASE("one trailing newline is dropped from every prompt: -p, -f and stdin give the same ids", "[cli-text]") {
  const std::string run = "run -m " + kModel + " -n 8 --ignore-eos --ids";
  const std::string expected = stdout_of(run + " -p 'def f():'");
  REQUIRE(std::count(expected.begin(), expected.end(), ' ') == 7);
  CHECK(stdout_of(run + " -p 'def f():\n'") == expected);  // the one rule: -p too
  CHECK(piped("echo 'def f():'", run) == expected);
  CHECK(piped("printf '%s' 'def f():'", run) == expected);
  CHECK(stdout_of(run + " -p -", "echo 'def f():'") == expected);
  for (const std::string& text : {std::string("def f():"), std::string("def f():\n"), std::string("def f():\r\n")})
    CHECK(stdout_of(run + " -f " + temp_file("prompt-newline.txt", text).string()) == expected);
  // Only one: a prompt that ends in two newlines keeps the second, exactly as its ids say.
  const std::string ids = piped("printf 'def f():\\n'", "tokenize -m " + kModel);
  std::string with_newline = ids.substr(0, ids.size() - 1);
  std::replace(with_newline.begin(), with_newline.end(), ' ', ',');
  CHECK(stdout_of(run + " -p 'def f():\n\n'") == stdout_of(run + " --tokens " + with_newline));
  // The same rule under --chat.
  CHECK(piped("echo hi", "run -m " + kModel + " --chat -n 4 --ignore-eos --ids") ==
        stdout_of("run -m " + kModel + " -p hi --chat -n 4 --ignore-eos --ids"));
}

TEST_CASE("tokenize and detokenize are inverse on arbitrary bytes", "[cli-text]") {
  for (const std::string& s : {std::string("def f(x):\n    return x\n"), std::string("\xff\xfe\x00 bin\x80", 9),
                               std::string("héllo 日本 😀")}) {
    const fs::path in = temp_file("bytes.bin", s);
    const std::string ids = stdout_of("tokenize -m " + kModel + " < " + in.string());
    const fs::path ids_file = temp_file("ids.txt", ids);
    CHECK(stdout_of("detokenize -m " + kModel + " < " + ids_file.string()) == s);
  }
}

TEST_CASE("chat mode wraps the prompt in the Kimi K2 template", "[cli-text]") {
  const auto r = run_deltafin("run -m " + kModel + " -p hi --chat -n 4 --ids --ignore-eos --stats");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("\nprompt    ") != std::string::npos);
  // The fixture tokenizer gives <|im_system|>=306, <|im_middle|>=313, <|im_end|>=298, <|im_user|>=299,
  // <|im_assistant|>=300; the prompt is system + user turn + generation prompt.
  const std::string ids = piped("printf '%s' '<|im_user|>user<|im_middle|>hi'", "tokenize -m " + kModel);
  CHECK(ids.rfind("299 ", 0) == 0);
}

TEST_CASE("bad prompts give one clear line and exit 1", "[cli-text]") {
  for (const std::string& args : {std::string("run -m " + kModel + " -n 4 < /dev/null"),
                                  std::string("run -m " + kModel + " -f /nonexistent/prompt.txt -n 4"),
                                  std::string("run -m " + deltafin::test::fixture("dsv3_tiny") + " -p hi -n 4"),
                                  std::string("run -m " + kModel + " -p hi --temp -1"),
                                  std::string("run -m " + kModel + " -p hi --top-p 0"),
                                  std::string("detokenize -m " + kModel + " < " + temp_file("bad-ids.txt", "1 2 banana").string())}) {
    const auto r = run_deltafin(args);
    INFO(args << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.rfind("deltafin: ", 0) == 0);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  const auto binary = run_deltafin("run -m " + kModel + " -n 4 --ignore-eos < " +
                                   temp_file("binary.bin", std::string("\x00\xff\x01\x80zz", 6)).string());
  CHECK(binary.exit_code == 0);
}

// Runs `deltafin run -m kModel <args>`, sends it SIGINT after 800 ms, and returns its wait status
// and what it wrote to stderr.
std::pair<int, std::string> run_interrupted(std::vector<std::string> args) {
  const fs::path err = fs::temp_directory_path() / ("deltafin-sigint-" + std::to_string(::getpid()));
  args.insert(args.begin(), {"deltafin", "run", "-m", kModel});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    freopen("/dev/null", "w", stdout);
    freopen(err.c_str(), "w", stderr);
    execv(deltafin::test::binary().c_str(), argv.data());
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  kill(child, SIGINT);
  int status = 0;
  waitpid(child, &status, 0);
  std::ifstream in(err);
  std::string log((std::istreambuf_iterator<char>(in)), {});
  fs::remove(err);
  return {status, log};
}

TEST_CASE("Ctrl-C stops generation cleanly and still prints the receipt", "[cli-text]") {
  const auto [status, log] = run_interrupted({"-p", "def", "-n", "100000000", "--ignore-eos", "--past-context", "--stats"});
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(log.find("interrupted") != std::string::npos);
  CHECK(log.find("\nanswer    ") != std::string::npos);
}

TEST_CASE("Ctrl-C during prefill: the receipt counts the positions appended, not the whole prompt", "[cli-text]") {
  std::string tokens = "5";
  for (int i = 1; i < 16000; ++i) tokens += ",5";  // one position a pass: about 20 s of prefill
  const auto [status, log] =
      run_interrupted({"--tokens", tokens, "--ids", "-n", "1", "--chunk", "1", "--past-context", "--stats"});
  INFO(log);
  std::smatch match;
  REQUIRE(std::regex_search(log, match, std::regex(R"(prompt\s+(\d+) tokens)")));
  const long prefilled = std::stol(match[1]);
  CHECK(prefilled > 0);
  CHECK(prefilled < 16000);
}

TEST_CASE("the version line names the SIMD target, and DELTAFIN_SIMD forces one and refuses unknown names", "[cli-text]") {
  const std::string binary = deltafin::test::binary();
  const auto plain = test::run_command("env -u DELTAFIN_SIMD " + binary + " --version");
  CHECK(plain.exit_code == 0);
  const std::string best = cpu::simd_available().front();
  std::string all;
  for (const std::string& t : cpu::simd_available()) all += (all.empty() ? std::string() : std::string(" ")) + t;
  CHECK(plain.output.find("simd: " + best + " (available: " + all + ")\n") != std::string::npos);
  for (const std::string& t : cpu::simd_available()) {
    const auto forced = test::run_command("DELTAFIN_SIMD=" + t + " " + binary + " --version");
    CHECK(forced.output.find("simd: " + t + " (available: ") != std::string::npos);
  }
  for (const char* bad : {"AVX9", "avx2", "NEON_FAKE"}) {
    const auto r = test::run_command(std::string("DELTAFIN_SIMD=") + bad + " " + binary + " run -p hi -n 1");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output == std::string("deltafin: DELTAFIN_SIMD=") + bad +
                          ": not a SIMD target this build runs on this CPU (available: " + all + ")\n");
  }
}
