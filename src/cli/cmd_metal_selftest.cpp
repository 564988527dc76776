// `deltafin metal-selftest [--json FILE]`: what the first Mac reports. The device (name,
// maxBufferLength, recommendedMaxWorkingSetSize), the compile log of every pipeline, every op
// against the CPU backend on synthetic data (backend/backend_check.hpp), a no-copy wrap of a
// 16 KiB-aligned buffer, the routed-experts op's GB/s on K3 shapes against a copy kernel in the
// same run, and the bundled model's greedy ids on Metal against the CPU's; printed and written
// as JSON. Exit 0 only when everything passed. A build without Metal (anything but macOS) says
// so in one line and exits 1.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "backend/backend.hpp"
#include "backend/backend_check.hpp"
#include "backend/metal/metal_device.hpp"
#include "cli/commands.hpp"
#include "util/error.hpp"

namespace deltafin::cli {
namespace {

struct SelftestFlags {
  std::string json = "metal-selftest.json";
  std::string model;
  int tokens = 16;
};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

// Greedy continuation of a fixed prompt on `backend`.
std::vector<int32_t> greedy_ids(const std::string& model, const std::string& backend, int tokens) {
  EngineOptions o;
  o.model_dir = model;
  o.backend = backend;
  const std::unique_ptr<Engine> engine = Engine::open(o);
  const std::unique_ptr<Session> session = engine->new_session();
  std::vector<int32_t> ids = {1, 2, 3, 4};
  std::vector<int32_t> generated;
  std::vector<float> logits = session->append(ids, false);
  for (int i = 0; i < tokens; ++i) {
    int32_t best = 0;
    for (int32_t v = 1; v < static_cast<int32_t>(logits.size()); ++v)
      if (logits[v] > logits[best]) best = v;
    generated.push_back(best);
    logits = session->append(std::vector<int32_t>{best}, false);
  }
  return generated;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

int run_selftest(const SelftestFlags& f) {
  const metal::DeviceReport r = metal::device_report();  // no Metal: a one-line error
  std::printf("device          %s (unified memory: %s)\n", r.name.c_str(), r.unified_memory ? "yes" : "no");
  std::printf("maxBufferLength %.2f GiB, recommendedMaxWorkingSetSize %.2f GiB, threadgroup memory %llu bytes\n",
              r.max_buffer_length / double(1ull << 30), r.recommended_working_set / double(1ull << 30),
              (unsigned long long)r.max_threadgroup_memory);
  for (const auto& [kernel, log] : r.pipelines)
    std::printf("pipeline        %-18s %s\n", kernel.c_str(), log.empty() ? "compiled" : log.c_str());
  bool ok = r.no_copy_wrap;
  std::printf("no-copy wrap    %s (%s)\n", r.no_copy_wrap ? "ok" : "FAILED", r.no_copy_detail.c_str());
  const std::unique_ptr<Backend> device = make_metal_backend(), cpu = make_cpu_backend(0);
  const std::vector<OpCheck> checks = check_ops(*device, *cpu);
  for (const OpCheck& c : checks) {
    ok = ok && c.pass();
    std::printf("op              %-26s nmse %.3g (bound %.3g) %s\n", c.op.c_str(), c.nmse, c.bound, c.pass() ? "ok" : "FAILED");
  }
  std::printf("bandwidth       routed experts %.1f GB/s, copy %.1f GB/s (%.0f %%)\n", r.expert_gbps, r.copy_gbps,
              r.copy_gbps > 0 ? 100 * r.expert_gbps / r.copy_gbps : 0.0);
  const std::string model = model_dir_or_default(f.model);
  const std::vector<int32_t> on_metal = greedy_ids(model, "metal", f.tokens), on_cpu = greedy_ids(model, "cpu", f.tokens);
  ok = ok && on_metal == on_cpu;
  std::printf("greedy ids      %s on Metal and the CPU (%s)\n", on_metal == on_cpu ? "identical" : "DIFFER", model.c_str());

  std::string json = "{\n  \"device\": " + quoted(r.name) + ",\n";
  json += fmt::format("  \"max_buffer_length\": {},\n  \"recommended_max_working_set_size\": {},\n", r.max_buffer_length,
                      r.recommended_working_set);
  json += fmt::format("  \"unified_memory\": {},\n  \"max_threadgroup_memory\": {},\n  \"language_version\": {},\n",
                      r.unified_memory, r.max_threadgroup_memory, quoted(r.language_version));
  json += "  \"pipelines\": [";
  for (size_t i = 0; i < r.pipelines.size(); ++i)
    json += (i ? ", " : "") + fmt::format("{{\"kernel\": {}, \"log\": {}}}", quoted(r.pipelines[i].first), quoted(r.pipelines[i].second));
  json += "],\n  \"ops\": [";
  for (size_t i = 0; i < checks.size(); ++i)
    json += (i ? ",\n    " : "\n    ") + fmt::format("{{\"op\": {}, \"nmse\": {:.6g}, \"bound\": {:.3g}, \"pass\": {}}}",
                                                   quoted(checks[i].op), checks[i].nmse, checks[i].bound, checks[i].pass());
  json += fmt::format("],\n  \"no_copy_wrap\": {},\n  \"expert_gbps\": {:.3f},\n  \"copy_gbps\": {:.3f},\n", r.no_copy_wrap,
                      r.expert_gbps, r.copy_gbps);
  json += "  \"greedy_ids_metal\": " + ids_json(on_metal) + ",\n  \"greedy_ids_cpu\": " + ids_json(on_cpu) + ",\n";
  json += fmt::format("  \"pass\": {}\n}}\n", ok);
  std::ofstream out(f.json);
  out << json;
  if (!out) fail("--json {}: cannot write the report", f.json);
  std::printf("report          %s (%s)\n", f.json.c_str(), ok ? "all passed" : "FAILURES");
  return ok ? 0 : 1;
}

}  // namespace

Command register_metal_selftest(CLI::App& app) {
  auto flags = std::make_shared<SelftestFlags>();
  CLI::App* sub = app.add_subcommand("metal-selftest", "Check the Metal backend on this Mac and write a JSON report");
  sub->add_option("--json", flags->json, "Where the report goes")->capture_default_str();
  sub->add_option("-m,--model", flags->model, "Model for the greedy-ids check (default: the bundled models/default)");
  sub->add_option("--tokens", flags->tokens, "Greedy tokens to compare")->capture_default_str();
  return {sub, [flags] { return run_selftest(*flags); }};
}

}  // namespace deltafin::cli
