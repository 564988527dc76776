// check_ops (backend_check.hpp): each op once on each backend with the same synthetic inputs
// (odd shapes: rows not a multiple of any kernel's tile), outputs downloaded and compared.
#include "backend/backend_check.hpp"

#include <array>
#include <cstring>
#include <memory>
#include <random>

#include "util/error.hpp"

namespace deltafin {
namespace {

constexpr const auto& kFormats = kWeightFormats;

// A weight's stored bytes: data, and scales where the format has them (finite values only).
struct HostWeight {
  WeightFormat format;
  int64_t rows, cols;
  std::vector<std::byte> data, scales;
};

HostWeight random_weight(WeightFormat f, int64_t rows, int64_t cols, std::mt19937& rng) {
  HostWeight w{f, rows, cols, {}, {}};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto bytes = [&](std::vector<std::byte>& out, const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  const int64_t n = rows * cols;
  switch (f) {
    case WeightFormat::F32:
      for (int64_t i = 0; i < n; ++i) {
        const float v = normal(rng);
        bytes(w.data, &v, 4);
      }
      break;
    case WeightFormat::F16:
    case WeightFormat::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t code;
        if (f == WeightFormat::BF16) {
          const float v = normal(rng);
          uint32_t b;
          std::memcpy(&b, &v, 4);
          code = static_cast<uint16_t>(b >> 16);
        } else {
          do code = static_cast<uint16_t>(rng());
          while (((code >> 10) & 0x1f) == 31);
        }
        bytes(w.data, &code, 2);
      }
      break;
    case WeightFormat::F8_E4M3_BLOCK128:
      for (int64_t i = 0; i < n; ++i) {
        uint8_t code;
        do code = static_cast<uint8_t>(rng());
        while ((code & 0x7f) == 0x7f);
        w.data.push_back(std::byte(code));
      }
      for (int64_t i = 0; i < ((rows + 127) / 128) * ((cols + 127) / 128); ++i) {
        const float s = 0.01f + 0.001f * float(rng() % 90);
        bytes(w.scales, &s, 4);
      }
      break;
    case WeightFormat::MXFP4:
      for (int64_t i = 0; i < n / 2; ++i) w.data.push_back(std::byte(static_cast<uint8_t>(rng())));
      for (int64_t i = 0; i < n / 32; ++i) w.scales.push_back(std::byte(static_cast<uint8_t>(115 + rng() % 15)));
      break;
    case WeightFormat::INT4_G32:
      for (int64_t i = 0; i < rows * ((cols + 7) / 8); ++i) {
        const uint32_t word = static_cast<uint32_t>(rng());
        bytes(w.data, &word, 4);
      }
      for (int64_t i = 0; i < rows * ((cols + 31) / 32); ++i) {
        const float v = 0.02f * normal(rng);
        uint32_t b;
        std::memcpy(&b, &v, 4);
        const uint16_t code = static_cast<uint16_t>(b >> 16);
        bytes(w.scales, &code, 2);
      }
      break;
  }
  return w;
}

// Host data on one backend and back.
struct On {
  Backend& backend;
  std::vector<std::unique_ptr<Buffer>> buffers;

  Tensor tensor(int64_t rows, int64_t cols, const void* data = nullptr, Elem elem = Elem::F32) {
    buffers.push_back(backend.allocate(static_cast<uint64_t>(rows * cols) * 4));
    if (data) backend.upload(data, *buffers.back(), 0, static_cast<uint64_t>(rows * cols) * 4);
    return Tensor::of(*buffers.back(), rows, cols, elem);
  }
  Tensor tensor(int64_t rows, int64_t cols, const std::vector<float>& v) { return tensor(rows, cols, v.data()); }
  Weight weight(const HostWeight& h) {
    buffers.push_back(backend.allocate(h.data.size()));
    backend.upload(h.data.data(), *buffers.back(), 0, h.data.size());
    Weight w{h.format, h.rows, h.cols, buffers.back().get(), 0, nullptr, 0};
    if (!h.scales.empty()) {
      buffers.push_back(backend.allocate(h.scales.size()));
      backend.upload(h.scales.data(), *buffers.back(), 0, h.scales.size());
      w.scales = buffers.back().get();
    }
    return w;
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(t.rows * t.cols);
    backend.download(t, v.data());
    return v;
  }
};

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return 1e300;
  double err = 0, norm = 1e-300;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(ref[i]);
    err += d * d, norm += double(ref[i]) * ref[i];
  }
  return err != err ? 1e300 : err / norm;  // NaN: fails every bound
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace

std::vector<OpCheck> check_ops(Backend& device, Backend& reference) {
  std::vector<OpCheck> checks;
  std::mt19937 rng(2026);
  // Runs `op` on both backends with inputs made by the same generator state; compares what it returns.
  auto both = [&](const std::string& name, double bound, auto&& op) {
    const std::mt19937 start = rng;
    On d{device, {}}, r{reference, {}};
    std::mt19937 a = start, b = start;
    const std::vector<float> got = op(d, a), want = op(r, b);
    rng = a;
    checks.push_back({name, nmse(got, want), bound});
  };
  for (WeightFormat f : kFormats) {
    both(std::string("matmul ") + weight_format_name(f), 4e-10, [&](On& on, std::mt19937& g) {
      const HostWeight w = random_weight(f, 37, 160, g);
      const Tensor y = on.tensor(5, 37);
      on.backend.matmul(on.weight(w), on.tensor(5, 160, random_floats(5 * 160, g)), y);
      return on.get(y);
    });
    both(std::string("embed ") + weight_format_name(f), 0.0, [&](On& on, std::mt19937& g) {
      const HostWeight w = random_weight(f, 40, 64, g);
      const std::vector<int32_t> ids = {3, 0, 39, 3, 17};
      const Tensor out = on.tensor(5, 64);
      on.backend.embed(on.weight(w), on.tensor(5, 1, ids.data(), Elem::I32), out);
      return on.get(out);
    });
  }
  const int64_t n = 5, cols = 37;
  both("rmsnorm", 4e-12, [&](On& on, std::mt19937& g) {
    const Tensor x = on.tensor(n, cols, random_floats(n * cols, g, 3.0f)), out = on.tensor(n, cols);
    on.backend.rmsnorm(x, on.tensor(1, cols, random_floats(cols, g)), 1e-6f, out);
    return on.get(out);
  });
  both("add", 0.0, [&](On& on, std::mt19937& g) {
    const Tensor a = on.tensor(n, cols, random_floats(n * cols, g)), b = on.tensor(n, cols, random_floats(n * cols, g));
    on.backend.add(a, b, a);
    return on.get(a);
  });
  both("mul_sigmoid", 4e-12, [&](On& on, std::mt19937& g) {
    const Tensor a = on.tensor(n, cols, random_floats(n * cols, g, 3.0f)), b = on.tensor(n, cols, random_floats(n * cols, g, 3.0f));
    on.backend.mul_sigmoid(a, b, a);
    return on.get(a);
  });
  for (const GatedActivation act : {GatedActivation{GatedActivation::kSiLU}, GatedActivation{GatedActivation::kSiTU, 4.0f, 25.0f}})
    both(act.kind == GatedActivation::kSiLU ? "gated SiLU" : "gated SiTU", 4e-12, [&](On& on, std::mt19937& g) {
      const Tensor a = on.tensor(n, cols, random_floats(n * cols, g, 3.0f)), b = on.tensor(n, cols, random_floats(n * cols, g, 3.0f));
      on.backend.gated(act, a, b, a);
      return on.get(a);
    });
  both("rope", 4e-12, [&](On& on, std::mt19937& g) {
    std::vector<float> freq(8);
    for (int i = 0; i < 8; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / 16);
    const Tensor x = on.tensor(6, 72, random_floats(6 * 72, g));
    on.backend.rope(x, 3, 24, 8, on.tensor(1, 8, freq), 1.2f, 1000);
    return on.get(x);
  });
  both("mla_attention", 4e-10, [&](On& on, std::mt19937& g) {
    const MlaShape s{3, 8, 4, 8, 16, 0.3f};
    const int64_t q_rows = 5, start = 7, ctx = start + q_rows;
    const HostWeight kv_b = random_weight(WeightFormat::BF16, s.heads * (s.nope + s.v), s.kv_lora, g);
    const Tensor q = on.tensor(q_rows, s.heads * (s.nope + s.rope), random_floats(q_rows * s.heads * (s.nope + s.rope), g));
    const Tensor c = on.tensor(ctx, s.kv_lora, random_floats(ctx * s.kv_lora, g)), pe = on.tensor(ctx, s.rope, random_floats(ctx * s.rope, g));
    const Tensor out = on.tensor(q_rows, s.heads * s.v);
    on.backend.mla_attention(s, on.weight(kv_b), q, c, pe, start, out);
    return on.get(out);
  });
  both("kda", 4e-10, [&](On& on, std::mt19937& g) {
    const int64_t t = 5, heads = 2, hd = 8, ch = heads * hd, taps = 4;
    KdaArgs a;
    a.heads = heads, a.head_dim = hd, a.taps = taps, a.gate_lower_bound = -5.0f, a.norm_eps = 1e-6f;
    a.q = on.tensor(t, ch, random_floats(t * ch, g)), a.k = on.tensor(t, ch, random_floats(t * ch, g));
    a.v = on.tensor(t, ch, random_floats(t * ch, g)), a.beta = on.tensor(t, heads, random_floats(t * heads, g));
    a.decay = on.tensor(t, ch, random_floats(t * ch, g));
    a.conv_q = on.tensor(ch, taps, random_floats(ch * taps, g, 0.5f)), a.conv_k = on.tensor(ch, taps, random_floats(ch * taps, g, 0.5f));
    a.conv_v = on.tensor(ch, taps, random_floats(ch * taps, g, 0.5f));
    a.dt_bias = on.tensor(1, ch, random_floats(ch, g)), a.decay_rate = on.tensor(1, heads, std::vector<float>{0.5f, 2.0f});
    a.window = on.tensor(3 * (taps - 1), ch, random_floats(3 * (taps - 1) * ch, g));
    a.state = on.tensor(ch, hd, random_floats(ch * hd, g, 0.1f)), a.out = on.tensor(t, ch);
    on.backend.kda(a);
    std::vector<float> result = on.get(a.out), state = on.get(a.state);
    result.insert(result.end(), state.begin(), state.end());
    return result;
  });
  both("attn_res_mix", 4e-11, [&](On& on, std::mt19937& g) {
    std::vector<Tensor> candidates;
    for (int i = 0; i < 3; ++i) candidates.push_back(on.tensor(4, 48, random_floats(4 * 48, g, 2.0f)));
    const Tensor out = on.tensor(4, 48);
    on.backend.attn_res_mix(candidates, on.tensor(1, 48, random_floats(48, g)), 1e-6f, out);
    return on.get(out);
  });
  both("route (ids and weights)", 4e-12, [&](On& on, std::mt19937& g) {
    const RouterSpec spec{32, 6, 4, 2, true, 2.5f};
    const Tensor ids = on.tensor(7, spec.top_k, nullptr, Elem::I32), w = on.tensor(7, spec.top_k);
    on.backend.route(spec, on.tensor(7, spec.experts, random_floats(7 * spec.experts, g, 2.0f)),
                     on.tensor(1, spec.experts, random_floats(spec.experts, g, 0.1f)), ids, w);
    std::vector<int32_t> chosen(7 * spec.top_k);
    on.backend.download(ids, chosen.data());
    std::vector<float> result = on.get(w);
    for (int32_t id : chosen) result.push_back(float(id));  // a different id shows as a large error
    return result;
  });
  // The three expert ops as the driver runs them (model/expert_driver.hpp): the slot lists, each
  // expert over its slots, the ascending combine; the lists and counts go into the result too.
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::INT4_G32})
    both(std::string("expert ops ") + weight_format_name(f), 4e-10, [&](On& on, std::mt19937& g) {
      const int64_t rows = 4, k = 2, in = 64, width = 32;
      const std::vector<int32_t> ids = {0, 3, 3, 5, 0, 1, 2, 3}, chosen = {0, 1, 2, 3, 5};
      const std::vector<float> weights = {0.7f, 0.3f, 1.5f, -0.5f, 0.25f, 0.75f, 1.0f, 2.0f};
      const int64_t count = static_cast<int64_t>(chosen.size());
      const Tensor id_t = on.tensor(rows, k, ids.data(), Elem::I32), x = on.tensor(rows, in, random_floats(rows * in, g));
      const Tensor lists = on.tensor(count, rows, nullptr, Elem::I32), counts = on.tensor(count, 1, nullptr, Elem::I32);
      const Tensor hidden = on.tensor(rows * k, width), y = on.tensor(rows * k, in), out = on.tensor(rows, in);
      on.backend.expert_slots(id_t, on.tensor(count, 1, chosen.data(), Elem::I32), lists, counts);
      for (int64_t e = 0; e < count; ++e) {
        const std::array<HostWeight, 3> host = {random_weight(f, width, in, g), random_weight(f, width, in, g),
                                                random_weight(f, in, width, g)};
        const ResidentExpert expert{{on.weight(host[0]), on.weight(host[1]), on.weight(host[2])}, e};
        on.backend.expert_ffn(std::span(&expert, 1), x, lists, counts, GatedActivation{GatedActivation::kSiTU, 4.0f, 25.0f},
                              hidden, y);
      }
      on.backend.expert_combine(id_t, on.tensor(rows, k, weights), y, out);
      std::vector<float> result = on.get(out);
      std::vector<int32_t> slots(count * rows), used(count);
      on.backend.download(lists, slots.data());
      on.backend.download(counts, used.data());
      for (int64_t e = 0; e < count; ++e)
        for (int32_t i = 0; i < used[e]; ++i) result.push_back(float(slots[e * rows + i]));  // a wrong slot: a large error
      return result;
    });
  return checks;
}

}  // namespace deltafin
