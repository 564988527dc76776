// What the backend tests share: host data on a backend and back (Device: data reaches a backend
// only through upload() and leaves it through download(), so the same code serves device
// backends), random inputs, the normalised error and a bitwise comparison.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "random_weights.hpp"

namespace deltafin::test {

// Normalised mean squared error: sum (a - ref)^2 / sum ref^2.
inline double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  REQUIRE(a.size() == ref.size());
  double err = 0, norm = 1e-300;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return err / norm;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

// Host data on a backend, and back.
struct Device {
  Backend& backend;
  std::vector<std::unique_ptr<Buffer>> buffers;

  Tensor tensor(int64_t rows, int64_t cols, const void* data = nullptr, Elem elem = Elem::F32) {
    buffers.push_back(backend.allocate(static_cast<uint64_t>(rows * cols) * 4));
    if (data) backend.upload(data, *buffers.back(), 0, static_cast<uint64_t>(rows * cols) * 4);
    return Tensor::of(*buffers.back(), rows, cols, elem);
  }
  Tensor tensor(int64_t rows, int64_t cols, const std::vector<float>& v) { return tensor(rows, cols, v.data()); }
  Weight weight(const TestMatrix& m) {
    const WeightView v = m.view();
    buffers.push_back(backend.allocate(m.data_bytes()));
    backend.upload(v.data, *buffers.back(), 0, m.data_bytes());
    Weight w{v.format, v.rows, v.cols, buffers.back().get(), 0, nullptr, 0};
    if (m.scale_bytes()) {
      buffers.push_back(backend.allocate(m.scale_bytes()));
      backend.upload(v.scales, *buffers.back(), 0, m.scale_bytes());
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

}  // namespace deltafin::test
