// deltafin: run giant MoE models with experts streamed from SSD. Entry point and dispatch.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "cli/commands.hpp"
#include "cpu/simd_target.hpp"
#include "util/error.hpp"

int main(int argc, char** argv) {
  using namespace deltafin;
  CLI::App app{"deltafin: runs giant Mixture-of-Experts models with experts streamed from SSD"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return "deltafin 0.1.0\n" + cpu::simd_summary(); });
  const cli::Command commands[] = {cli::register_run(app), cli::register_logits(app), cli::register_inspect(app),
                                     cli::register_tokenize(app), cli::register_detokenize(app),
                                     cli::register_place(app),    cli::register_verify(app),
                                     cli::register_metal_selftest(app), cli::register_serve(app)};
  spdlog::set_default_logger(spdlog::stderr_logger_mt("deltafin"));  // warnings go to stderr
  spdlog::set_pattern("deltafin: %l: %v");
  try {
    cpu::simd_select_from_env();  // before parsing: --version reports the forced target
  } catch (const Error& e) {
    std::fprintf(stderr, "deltafin: %s\n", e.what());
    return 1;
  }
  if (argc > 1 && argv[1][0] != '-') {  // name the command that does not exist
    std::string names;
    bool known = false;
    for (const cli::Command& command : commands) {
      known = known || command.app->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + command.app->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "deltafin: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
      return 1;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::string message = e.what();  // one line, exit 1, like every other error
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::fprintf(stderr, "deltafin: %s (see --help)\n", message.c_str());
    return 1;
  }
  try {
    for (const cli::Command& command : commands) {
      if (!command.app->parsed()) continue;
      const int code = command.run();
      std::fflush(stdout);
      cli::check_stdout();  // what the command printed must have reached stdout
      return code;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "deltafin: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "deltafin: out of memory (try a smaller --cache-gb)\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {  // e.g. an unreadable model directory
    const std::string path = e.path1().empty() ? "" : e.path1().string() + ": ";
    std::fprintf(stderr, "deltafin: %s%s\n", path.c_str(), e.code().message().c_str());
    return 1;
  } catch (const std::exception& e) {  // anything else still ends in one line, never a core
    std::fprintf(stderr, "deltafin: %s\n", e.what());
    return 1;
  }
  return 1;
}
