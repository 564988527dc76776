// Spine loading (see spine.hpp).
#include "model/spine.hpp"

#include "cpu/matmul.hpp"

namespace deltafin {

SpineMatrix load_spine_matrix(const WeightIndex& index, const std::string& name, int64_t rows, int64_t cols) {
  const MatrixRef ref = index.matrix(name, rows, cols);
  SpineMatrix m;
  m.data = AlignedBuffer(ref.weight.info->nbytes);
  index.read(ref.weight, m.data.data());
  m.view = WeightView{ref.format, m.data.data(), rows, cols, nullptr};
  if (ref.scale.info) {
    m.scales = AlignedBuffer(ref.scale.info->nbytes);
    index.read(ref.scale, m.scales.data());
    m.view.scales = m.scales.data();
  }
  return m;
}

std::vector<float> load_spine_vector(const WeightIndex& index, const std::string& name, int64_t n) {
  return load_spine_floats(index, name, {{n}});
}

std::vector<float> load_spine_floats(const WeightIndex& index, const std::string& name,
                                     const std::vector<std::vector<int64_t>>& shapes) {
  const TensorRef ref = index.floats(name, shapes);
  const int64_t n = ref.info->numel();
  AlignedBuffer raw(ref.info->nbytes);
  index.read(ref, raw.data());
  const WeightFormat format = ref.info->dtype == DType::F32    ? WeightFormat::F32
                              : ref.info->dtype == DType::BF16 ? WeightFormat::BF16
                                                               : WeightFormat::F16;
  std::vector<float> out(n);
  cpu::dequantize_row(WeightView{format, raw.data(), 1, n, nullptr}, 0, out.data());
  return out;
}

}  // namespace deltafin
