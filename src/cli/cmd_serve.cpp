// `deltafin serve`: the OpenAI-compatible HTTP server (src/serve) on the engine `run` uses, with
// run's engine and drafter flags. Loopback unless --host says otherwise (with a warning when no
// API key is set). SIGINT and SIGTERM are taken by one thread (sigwait), which shuts the server
// down: the running generation ends after its current token and is answered with an error, and
// the command exits 0 (a second signal ends it at once, 130). The port is bound before the model
// loads; the open-file limit is raised to fit --max-connections. --prefix-cache DIR keeps the
// held sessions' prefixes on disk too (serve/session_cache.hpp).
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/prefix_cache_flags.hpp"
#include "serve/http_server.hpp"
#include "util/error.hpp"

namespace deltafin::cli {
namespace {

constexpr uint64_t kRuntimeAllowance = 256ull << 20;  // threads, tokenizer, buffers
constexpr rlim_t kFilesBesideConnections = 128;          // model files, drives, pipes
constexpr int kHandlersBesideTheLine = 16;               // /health, /metrics and refusals while the line is full

struct ServeFlags {
  EngineOptions engine;
  serve::ServerOptions server;
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (printed)
  serve::ConnectionLimits connections;
  std::string draft = "auto", draft_model;
  SpeculativeOptions speculative;
  int64_t context = 8192;
  double max_body_mb = 4;
  bool no_session_reuse = false;
  PrefixCacheFlags prefix_cache;
};

// Raises the open-file limit (soft, up to the hard one) so that max_connections sockets fit beside
// the engine's files; where the hard limit is lower, the connections are capped to fit it.
void fit_open_file_limit(int& max_connections) {
  const rlim_t wanted = static_cast<rlim_t>(max_connections) + kFilesBesideConnections;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur >= wanted) return;
  const int fits = std::max(1, static_cast<int>(limit.rlim_cur) - static_cast<int>(kFilesBesideConnections));
  spdlog::warn("--max-connections {}: only {} files may be open (ulimit -n); serving {} connections at most", max_connections,
               static_cast<long long>(limit.rlim_cur), fits);
  max_connections = fits;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int serve_command(ServeFlags& f) {
  if (f.port < 0 || f.port > 65535) fail("--port must be 0..65535 (0: any free port; got {})", f.port);
  if (f.server.max_waiting < 0 || f.server.max_waiting > 1024) fail("--queue must be 0..1024 (got {})", f.server.max_waiting);
  if (f.context < 1) fail("--ctx-size must be >= 1 (got {})", f.context);
  if (f.server.default_max_tokens < 0) fail("--max-tokens must be >= 0 (got {})", f.server.default_max_tokens);
  if (!(f.max_body_mb > 0 && f.max_body_mb <= 1024)) fail("--max-body-mb must be > 0 and <= 1024 (got {})", f.max_body_mb);
  serve::ConnectionLimits& connections = f.connections;
  if (connections.max_connections < 1) fail("--max-connections must be >= 1 (got {})", connections.max_connections);
  if (connections.max_per_address < 1) fail("--max-connections-per-address must be >= 1 (got {})", connections.max_per_address);
  if (!(connections.head_seconds > 0 && connections.head_seconds <= 3600))
    fail("--request-timeout must be > 0 and <= 3600 seconds (got {})", connections.head_seconds);
  if (f.speculative.max_k < 0 || f.speculative.max_k > 16)
    fail("--draft-k must be 0..16 (0: no drafts; got {})", f.speculative.max_k);
  if (!f.prefix_cache.dir.empty() && f.no_session_reuse)
    fail("--prefix-cache: not with --no-session-reuse (which prefills every prompt from the start)");
  check_prefix_cache_flags(f.prefix_cache);
  if (!is_loopback(f.host) && f.server.api_key.empty())
    spdlog::warn("--host {}: serving beyond this machine with no --api-key: anyone who can reach it can use it", f.host);
  connections.max_body_bytes = static_cast<uint64_t>(f.max_body_mb * (1 << 20));
  connections.max_buffered_bytes = std::max(connections.max_buffered_bytes, 2 * connections.max_body_bytes);
  connections.max_handlers = std::max(connections.max_handlers, f.server.max_waiting + 1 + kHandlersBesideTheLine);
  fit_open_file_limit(connections.max_connections);
  if (f.server.model_name.empty()) f.server.model_name = std::filesystem::weakly_canonical(f.engine.model_dir).filename().string();

  // Signals are blocked before any thread starts, so that only the watcher below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is a failed write, not the end of the server

  // Bound before the engines load, so that a port in use fails at once.
  serve::ConnectionLoop loop(connections);
  const int port = loop.bind(f.host, f.port);
  RunEngines engines = open_engines(f.engine, f.draft, f.draft_model, f.speculative.max_k, SamplerOptions{}, f.context);
  const ModelSummary summary = engines.target->summary();
  f.server.context = summary.context_length > 0 ? std::min(f.context, summary.context_length) : f.context;
  f.server.memory_budget = summary.spine_bytes + engines.target->stats().cache_budget_bytes + summary.planned_state_bytes +
                           summary.pass_activation_bytes +
                           engines.draft_bytes + kRuntimeAllowance + connections.max_buffered_bytes;
  const std::string drafter = engines.drafter ? engines.drafter->name() : "off";
  std::unique_ptr<PrefixCache> prefix_cache = open_prefix_cache(f.prefix_cache, *engines.target);
  serve::Generator generator(f.engine.model_dir, std::move(engines.target), std::move(engines.drafter), f.speculative,
                             summary.pass_positions, !f.no_session_reuse, std::move(prefix_cache));
  serve::HttpServer server(generator, f.server, loop);
  std::fprintf(stderr, "deltafin: serving %s (%s, chat format %s, drafter %s) on http://%s:%d\n", f.server.model_name.c_str(),
               summary.architecture.c_str(), chat_style_name(generator.chat_style()), drafter.c_str(),
               f.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> served{false};
  std::thread watcher([&] {
    for (bool first = true;; first = false) {
      int signal = 0;
      sigwait(&stop_signals, &signal);
      if (served) return;
      if (!first) {  // a second Ctrl-C ends the process at once
        std::fprintf(stderr, "deltafin: stopped without finishing\n");
        std::_Exit(130);
      }
      std::fprintf(stderr, "deltafin: %s: finishing the current token, then stopping\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
      server.shut_down();
    }
  });
  server.serve();
  served = true;
  pthread_kill(watcher.native_handle(), SIGTERM);  // wake the watcher, which is waiting for a signal
  watcher.join();
  std::fprintf(stderr, "deltafin: server stopped\n");
  return 0;
}

}  // namespace

Command register_serve(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  add_engine_flags(*sub, f->engine);
  sub->add_option("--host", f->host, "Address to listen on (another than loopback: add --api-key)")->capture_default_str();
  sub->add_option("--port", f->port, "Port to listen on (0: any free port)")->capture_default_str();
  sub->add_option("--api-key", f->server.api_key, "Require 'Authorization: Bearer KEY' on /v1/ requests");
  sub->add_option("--model-name", f->server.model_name, "The model's id in the API (default: the directory's name)");
  sub->add_option("--ctx-size", f->context, "Positions a request may reach, prompt + max_tokens (capped at the model's context)")
      ->capture_default_str();
  sub->add_option("--max-tokens", f->server.default_max_tokens, "New tokens at most when a request does not say")
      ->capture_default_str();
  sub->add_option("--queue", f->server.max_waiting, "Requests that may wait behind the running one (more: 503)")
      ->capture_default_str();
  sub->add_option("--max-body-mb", f->max_body_mb, "Largest request body (MB; larger: 413)")->capture_default_str();
  sub->add_option("--max-connections", f->connections.max_connections, "Connections open at once (more: 503)")
      ->capture_default_str();
  sub->add_option("--max-connections-per-address", f->connections.max_per_address,
                  "Connections open at once from one client address (more: 429)")
      ->capture_default_str();
  sub->add_option("--request-timeout", f->connections.head_seconds,
                  "Seconds a request's head may take to arrive; its body gets as long again plus 1 s per 64 KiB (slower: 408)")
      ->capture_default_str();
  sub->add_flag("--no-session-reuse", f->no_session_reuse, "Prefill every prompt from the start (no prefix kept between requests)");
  add_prefix_cache_flags(*sub, f->prefix_cache);
  sub->add_option("--draft", f->draft, "Speculative drafter for greedy requests: auto, off, model, ngram, dspark, eagle3")->capture_default_str();
  sub->add_option("--draft-model", f->draft_model, "Draft model directory (shares the target's tokenizer), or the DSpark drafter's / EAGLE-3 head's with --draft dspark / eagle3");
  sub->add_option("--draft-k", f->speculative.max_k, "Most guesses per target pass")->capture_default_str();
  sub->add_flag_callback("--no-adaptive", [f] { f->speculative.adaptive = false; },
                         "Always draft --draft-k guesses (no cost model)");
  return {sub, [f] {
            f->engine.model_dir = model_dir_or_default(f->engine.model_dir);
            if (expert_host_rank()) return serve_expert_host(f->engine);
            return serve_command(*f);
          }};
}

}  // namespace deltafin::cli
