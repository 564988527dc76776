// The projection over several hosts of `deltafin inspect --hosts` (see inspect_hosts.hpp).
#include "cli/inspect_hosts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "decode/memory_plan.hpp"
#include "hosts/wire.hpp"
#include "util/error.hpp"

namespace deltafin::cli {
namespace {

// Compute rates measured on an H100 at Kimi K3's real per-layer shapes
// (k3-public-bench/results/cuda-k3-shapes.md): the K3-shaped bench model's spine (5 layers,
// 6,991,125,504 B besides the embedding table, of which a token reads one row) took 1.081 ms a
// layer warm; the expert op ran one position's 16 MXFP4 experts at 1149 GB/s.
constexpr double kSpineBytesPerSecond = 6'991'125'504.0 / (5 * 1.081e-3);
constexpr double kExpertBytesPerSecond = 1149e9;

struct Link {
  std::string name;
  double bytes_per_second = 0, rtt_seconds = 0;
};

// The presets are assumptions, with their sources, in docs/hosts-projection.md.
const Link k10GbE{"10gbe", 1.25e9, 100e-6};
const Link kTb5{"tb5", 1.30e9, 300e-6};

double parse_positive(const std::string& item, double limit, bool& ok) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(item.c_str(), &end);
  ok = ok && !item.empty() && *end == '\0' && !errno && v > 0 && v < limit;
  return v;
}

std::vector<Link> links(const std::string& text) {
  if (text.empty()) return {k10GbE, kTb5};
  if (text == k10GbE.name) return {k10GbE};
  if (text == kTb5.name) return {kTb5};
  const size_t colon = text.find(':');
  bool ok = colon != std::string::npos;
  const double gbps = ok ? parse_positive(text.substr(0, colon), 1e4, ok) : 0;
  const double rtt_us = ok ? parse_positive(text.substr(colon + 1), 1e7, ok) : 0;
  if (!ok) fail("--link: '{}' is not 10gbe, tb5 or GBPS:RTT_US (GB/s and round-trip microseconds, like 1.25:100)", text);
  return {{text, gbps * 1e9, rtt_us * 1e-6}};
}

double choose(int64_t n, int64_t j) {
  if (j < 0 || j > n) return 0;
  double c = 1;
  for (int64_t i = 1; i <= j; ++i) c = c * static_cast<double>(n - j + i) / static_cast<double>(i);
  return c;
}

struct Host {
  int64_t experts = 0;             // of a layer's: expert e is host e % N's
  double share = 0, cache = 0;     // bytes of all its experts, of its expert cache
  double hit = 0;                  // under uniform use
  double seconds_per_expert = 0;   // a chosen expert: its read when it misses, then the expert op
};

// E[max over hosts of c_h t_h] when a layer's k experts are k distinct of the E, chosen
// uniformly, and c_h of them are host h's: the sum over the values v of v P(max = v), where
// P(max <= v) = [x^k] prod_h sum_{j : j t_h <= v} C(n_h, j) x^j / C(E, k).
double expected_busiest(const std::vector<Host>& hosts, int64_t k, int64_t all) {
  std::vector<double> values;
  for (const Host& h : hosts)
    for (int64_t j = 0; j <= std::min(k, h.experts); ++j) values.push_back(static_cast<double>(j) * h.seconds_per_expert);
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  double expected = 0, below = 0;
  for (double v : values) {
    std::vector<double> poly(static_cast<size_t>(k) + 1, 0.0);
    poly[0] = 1;
    for (const Host& h : hosts) {
      std::vector<double> next(poly.size(), 0.0);
      for (int64_t j = 0; j <= std::min(k, h.experts) && static_cast<double>(j) * h.seconds_per_expert <= v; ++j) {
        const double c = choose(h.experts, j);
        for (int64_t a = 0; a + j <= k; ++a) next[a + j] += poly[a] * c;
      }
      poly.swap(next);
    }
    const double at_most = poly[k] / choose(all, k);
    expected += v * (at_most - below);
    below = at_most;
  }
  return expected;
}

// The bytes of a decode pass's Request, Run and Result (hosts/wire.hpp) for a host that runs
// `mine` of the layer's top-k experts.
uint64_t layer_messages(const FamilyDescription& d, int64_t mine) {
  hosts::Request request;
  request.experts.resize(static_cast<size_t>(mine)), request.first.resize(static_cast<size_t>(mine));
  hosts::Run run;
  run.n = 1, run.k = d.top_k, run.in = d.expert_input;
  run.experts.resize(static_cast<size_t>(mine)), run.all.resize(static_cast<size_t>(d.top_k));
  run.ids.resize(static_cast<size_t>(d.top_k)), run.x.resize(static_cast<size_t>(d.expert_input));
  hosts::Result result;
  result.in = d.expert_input;
  result.slots.resize(static_cast<size_t>(mine)), result.rows.resize(static_cast<size_t>(mine * d.expert_input));
  return hosts::encode(request).size() + hosts::encode(run).size() + hosts::encode(result).size();
}

struct Projection {
  std::vector<Host> hosts;
  double busiest = 0, even = 0;    // a MoE layer's experts: expected busiest host; split evenly
  double spine_compute = 0, spine_read = 0;
  double remote_hosts = 0;         // expected hosts other than rank 0 that a layer sends work to
  double message_bytes = 0;        // a MoE layer's RUNs and RESULTs
  double token(const Link* link, int64_t moe_layers, bool evenly) const {
    const double net = link && hosts.size() > 1 ? link->rtt_seconds + message_bytes / link->bytes_per_second : 0;
    return spine_compute + spine_read + static_cast<double>(moe_layers) * ((evenly ? even : busiest) + net);
  }
};

Projection project(const FamilyDescription& d, const PrintedPlan& printed, int64_t n) {
  const BudgetPlan& p = printed.plan;
  double drives = 0;
  for (double r : printed.drive_gbps) drives += r * 1e9;
  const double slot = static_cast<double>(printed.expert_slot), k = static_cast<double>(d.top_k);
  Projection out;
  for (int64_t h = 0; h < n; ++h) {
    Host host;
    host.experts = (d.experts - h + n - 1) / n;
    host.share = static_cast<double>(host.experts * d.moe_layers) * slot;
    host.cache = std::min(host.share, static_cast<double>(h == 0 ? p.experts : expert_host_cache(p.budget, UINT64_MAX)));
    host.hit = host.share > 0 ? host.cache / host.share : 1;
    host.seconds_per_expert = slot * (1 - host.hit) / drives + slot / kExpertBytesPerSecond;
    out.even = std::max(out.even, k * static_cast<double>(host.experts) / static_cast<double>(d.experts) * host.seconds_per_expert);
    if (h > 0) out.remote_hosts += 1 - choose(d.experts - host.experts, d.top_k) / choose(d.experts, d.top_k);
    out.hosts.push_back(host);
  }
  out.busiest = expected_busiest(out.hosts, d.top_k, d.experts);
  out.spine_compute = static_cast<double>(d.bytes.spine - d.bytes.spine_embed) / kSpineBytesPerSecond;
  out.spine_read = static_cast<double>(p.spine_read_per_token) / drives;
  // Each host that holds some of the layer's experts gets a Request and a Run and sends a Result
  // back: a fixed size, and so much more for each of its experts.
  const double remote_slots = k * static_cast<double>(d.experts - out.hosts[0].experts) / static_cast<double>(d.experts);
  const double fixed = static_cast<double>(layer_messages(d, 0)), per_expert = static_cast<double>(layer_messages(d, 1)) - fixed;
  out.message_bytes = out.remote_hosts * fixed + remote_slots * per_expert;
  return out;
}

// "a" when every host but rank 0 has the same figure, else "a-b".
template <typename Get>
std::string others(const std::vector<Host>& hosts, Get get, const char* format) {
  double lo = get(hosts[1]), hi = lo;
  for (size_t h = 2; h < hosts.size(); ++h) lo = std::min(lo, get(hosts[h])), hi = std::max(hi, get(hosts[h]));
  const std::string a = fmt::format(fmt::runtime(format), lo), b = fmt::format(fmt::runtime(format), hi);
  return a == b ? a : a + "-" + b;
}

}  // namespace

void check_hosts_flags(const FamilyDescription& d, const PlanFlags& plan, const HostsFlags& h) {
  if (!h.given && h.link.empty()) return;
  if (!h.given) fail("--link needs --hosts (the number of hosts it joins)");
  if (h.hosts < 1 || h.hosts > std::max<int64_t>(d.experts, 1))
    fail("--hosts must be from 1 to {} (the routed experts of a layer; got {})", std::max<int64_t>(d.experts, 1), h.hosts);
  if (d.moe_layers == 0 || d.top_k == 0 || d.expert_input == 0) fail("--hosts: the model has no routed experts to share");
  if (plan.device_memory_gb != 0) fail("--hosts projects hosts of one memory pool: give --memory-gb, not --device-memory-gb");
  if (plan.memory_gb == 0 || plan.drive_gbps.empty())
    fail("--hosts needs --memory-gb and --drive-gbps (the memory and drives of each host)");
  links(h.link);
}

void print_hosts_projection(const FamilyDescription& d, const PrintedPlan& printed, const HostsFlags& h) {
  if (!h.given) return;
  const Projection one = project(d, printed, 1), pr = project(d, printed, h.hosts);
  const std::vector<Host>& hosts = pr.hosts;
  double drives = 0;
  for (double r : printed.drive_gbps) drives += r;
  const bool several = hosts.size() > 1;
  const auto ms = [](double s) { return s * 1e3; };
  std::printf("hosts          %lld x %.4f GB with %.4g GB/s of drives; the %lld experts of a layer by e %% %lld: rank 0 %lld "
              "(and the spine)%s\n",
              (long long)h.hosts, printed.plan.budget / 1e9, drives, (long long)d.experts, (long long)h.hosts,
              (long long)hosts[0].experts,
              several ? (", others " + others(hosts, [](const Host& x) { return double(x.experts); }, "{:.0f}")).c_str() : "");
  std::printf("expert cache   rank 0 %.6f GB of %.6f GB (hit %.4f%%)%s\n", hosts[0].cache / 1e9, hosts[0].share / 1e9,
              100 * hosts[0].hit,
              several ? fmt::format(", others {} GB of {} GB (hit {}%)", others(hosts, [](const Host& x) { return x.cache / 1e9; }, "{:.6f}"),
                                    others(hosts, [](const Host& x) { return x.share / 1e9; }, "{:.6f}"),
                                    others(hosts, [](const Host& x) { return 100 * x.hit; }, "{:.4f}"))
                            .c_str()
                      : "");
  std::printf("a MoE layer    %.4f ms, the busiest host expected under uniform routing (%.4f ms split evenly); an expert "
              "%.4f ms on rank 0%s (a miss read at %.4g GB/s, the expert op at %.0f GB/s)\n",
              ms(pr.busiest), ms(pr.even), ms(hosts[0].seconds_per_expert),
              several ? (", " + others(hosts, [](const Host& x) { return x.seconds_per_expert * 1e3; }, "{:.4f}") + " ms on the others").c_str()
                      : "",
              drives, kExpertBytesPerSecond / 1e9);
  std::printf("spine          %.4f ms a token on rank 0: %.6f GB computed at %.1f GB/s + %.6f GB streamed from the drives\n",
              ms(pr.spine_compute + pr.spine_read), (d.bytes.spine - d.bytes.spine_embed) / 1e9, kSpineBytesPerSecond / 1e9,
              printed.plan.spine_read_per_token / 1e9);
  const double t1 = one.token(nullptr, d.moe_layers, false);
  if (!several) {
    std::printf("projected      %.4f tok/s (%.2f ms a token) on one host, no messages\n", 1 / t1, ms(t1));
    return;
  }
  std::printf("messages       %.0f B a MoE layer: Request, Run and Result with %.4f hosts on average\n", pr.message_bytes, pr.remote_hosts);
  for (const Link& link : links(h.link)) {
    const double t = pr.token(&link, d.moe_layers, false), net = link.rtt_seconds + pr.message_bytes / link.bytes_per_second;
    std::printf("link %-9s %.4g GB/s, round trip %.0f us: %.4f ms a MoE layer, %.4f ms a token (%.2f%% of a step)\n",
                link.name.c_str(), link.bytes_per_second / 1e9, link.rtt_seconds * 1e6, ms(net),
                ms(net * static_cast<double>(d.moe_layers)), 100 * net * static_cast<double>(d.moe_layers) / t);
    std::printf("projected      %.4f tok/s over %s (%.2f ms a token) = %.2fx one host's %.4f tok/s; split evenly %.4f tok/s\n",
                1 / t, link.name.c_str(), ms(t), t1 / t, 1 / t1, 1 / pr.token(&link, d.moe_layers, true));
  }
}

}  // namespace deltafin::cli
