// deltafin: run giant MoE models with experts streamed from SSD. Entry point and dispatch.
#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "cli/commands.hpp"
#include "cpu/simd_target.hpp"
#include "hosts/host_group.hpp"
#include "util/error.hpp"

namespace {

// The commands that run on several hosts under mpirun (the others run on one).
bool runs_on_hosts(const std::string& command) { return command == "run" || command == "serve" || command == "logits"; }

// Prints an error: "deltafin: ..." (on an expert host of a run on several hosts, "deltafin (rank r): ...").
void report(const char* message) {
  const deltafin::hosts::HostGroup* group = deltafin::hosts::host_group();
  if (group && group->rank() > 0)
    std::fprintf(stderr, "deltafin (rank %d): %s\n", group->rank(), message);
  else
    std::fprintf(stderr, "deltafin: %s\n", message);
}

// After an error has been reported: a run on several hosts ends every rank (one may hang), else 1.
int failed() {
  if (deltafin::hosts::host_group()) deltafin::hosts::abort_hosts();
  deltafin::hosts::finish_hosts();
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace deltafin;
  try {
    hosts::start_hosts(&argc, &argv);  // first: MPI may take its own arguments
  } catch (const Error& e) {
    std::fprintf(stderr, "deltafin: %s\n", e.what());
    return 1;
  }
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
    report(e.what());
    return failed();
  }
  if (argc > 1 && argv[1][0] != '-') {  // name the command that does not exist
    std::string names;
    bool known = false;
    for (const cli::Command& command : commands) {
      known = known || command.app->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + command.app->get_name();
    }
    if (!known) {
      report(fmt::format("unknown command '{}' (commands: {})", argv[1], names).c_str());
      return failed();
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      const int code = app.exit(e);
      hosts::finish_hosts();
      return code;
    }
    std::string message = e.what();  // one line, exit 1, like every other error
    std::replace(message.begin(), message.end(), '\n', ' ');
    report((message + " (see --help)").c_str());
    return failed();
  }
  try {
    for (const cli::Command& command : commands) {
      if (!command.app->parsed()) continue;
      if (hosts::host_group() && !runs_on_hosts(command.app->get_name()))
        fail("{} runs on one host: start it without mpirun (run, serve and logits run on several)", command.app->get_name());
      const int code = command.run();
      std::fflush(stdout);
      cli::check_stdout();  // what the command printed must have reached stdout
      hosts::finish_hosts();
      return code;
    }
  } catch (const Error& e) {
    report(e.what());
    return failed();
  } catch (const std::bad_alloc&) {
    report("out of memory (try a smaller --cache-gb)");
    return failed();
  } catch (const std::filesystem::filesystem_error& e) {  // e.g. an unreadable model directory
    const std::string path = e.path1().empty() ? "" : e.path1().string() + ": ";
    report((path + e.code().message()).c_str());
    return failed();
  } catch (const std::exception& e) {  // anything else still ends in one line, never a core
    report(e.what());
    return failed();
  }
  return failed();
}
