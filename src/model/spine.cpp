// Spine loading (see spine.hpp).
#include "model/spine.hpp"

#include <cmath>

#include "cpu/matmul.hpp"
#include "util/error.hpp"
#include "weights/finite_check.hpp"

namespace deltafin {

namespace {

// A buffer for a spine tensor; running out of memory names the tensor.
AlignedBuffer spine_buffer(const TensorInfo& t) {
  try {
    return AlignedBuffer(t.nbytes);
  } catch (const std::bad_alloc&) {
    fail("out of memory loading the spine: tensor '{}' needs {:.3f} GB more (the machine's memory, or a ulimit -v)",
         t.name, t.nbytes / 1e9);
  }
}

}  // namespace

SpineMatrix load_spine_matrix(const WeightIndex& index, const std::string& name, int64_t rows, int64_t cols) {
  const MatrixRef ref = index.matrix(name, rows, cols);
  SpineMatrix m;
  m.data = spine_buffer(*ref.weight.info);
  index.read(ref.weight, m.data.data());
  m.view = WeightView{ref.format, m.data.data(), rows, cols, nullptr};
  if (ref.scale.info) {
    m.scales = spine_buffer(*ref.scale.info);
    index.read(ref.scale, m.scales.data());
    m.view.scales = m.scales.data();
  }
  require_finite(m.view, ref.weight.info->name, ref.scale.info ? ref.scale.info->name : "");
  return m;
}

std::vector<float> load_spine_vector(const WeightIndex& index, const std::string& name, int64_t n) {
  return load_spine_floats(index, name, {{n}});
}

std::vector<float> load_spine_floats(const WeightIndex& index, const std::string& name,
                                     const std::vector<std::vector<int64_t>>& shapes) {
  const TensorRef ref = index.floats(name, shapes);
  const int64_t n = ref.info->numel();
  AlignedBuffer raw = spine_buffer(*ref.info);
  index.read(ref, raw.data());
  const WeightFormat format = ref.info->dtype == DType::F32    ? WeightFormat::F32
                              : ref.info->dtype == DType::BF16 ? WeightFormat::BF16
                                                               : WeightFormat::F16;
  std::vector<float> out(n);
  cpu::dequantize_row(WeightView{format, raw.data(), 1, n, nullptr}, 0, out.data());
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i])) fail("tensor '{}': element {} is NaN or Inf; the checkpoint is damaged", ref.info->name, i);
  return out;
}

}  // namespace deltafin
