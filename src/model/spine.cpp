// SpineLoader (see spine.hpp).
#include "model/spine.hpp"

#include <cmath>

#include "cpu/matmul.hpp"
#include "io/aligned_buffer.hpp"
#include "util/error.hpp"
#include "weights/finite_check.hpp"

namespace deltafin {
namespace {

[[noreturn]] void out_of_memory(const TensorInfo& t) {
  fail("out of memory loading the spine: tensor '{}' needs {:.3f} GB more (the machine's memory, or a ulimit -v)", t.name,
       t.nbytes / 1e9);
}

// Host memory for a tensor; running out of memory names the tensor.
AlignedBuffer host_buffer(const TensorInfo& t) {
  try {
    return AlignedBuffer(t.nbytes);
  } catch (const std::bad_alloc&) {
    out_of_memory(t);
  }
}

}  // namespace

std::unique_ptr<Buffer> SpineLoader::read(const TensorRef& ref) {
  std::unique_ptr<Buffer> buffer;
  try {
    buffer = backend_.allocate(ref.info->nbytes);
  } catch (const std::bad_alloc&) {
    out_of_memory(*ref.info);
  }
  if (buffer->host()) {
    index_.read(ref, buffer->host());
  } else {
    AlignedBuffer staging = host_buffer(*ref.info);
    index_.read(ref, staging.data());
    backend_.upload(staging.data(), *buffer, 0, ref.info->nbytes);
  }
  bytes_ += buffer->bytes();
  return buffer;
}

SpineMatrix SpineLoader::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const MatrixRef ref = index_.matrix(name, rows, cols);
  SpineMatrix m;
  m.data = read(ref.weight);
  m.weight = {ref.format, rows, cols, m.data.get(), 0, nullptr, 0};
  if (ref.scale.info) {
    m.scales = read(ref.scale);
    m.weight.scales = m.scales.get();
  }
  if (m.data->host()) require_finite(m.weight.host_view(), ref.weight.info->name, ref.scale.info ? ref.scale.info->name : "");
  return m;
}

std::vector<float> SpineLoader::floats(const std::string& name, const std::vector<std::vector<int64_t>>& shapes) const {
  const TensorRef ref = index_.floats(name, shapes);
  const int64_t n = ref.info->numel();
  AlignedBuffer raw = host_buffer(*ref.info);
  index_.read(ref, raw.data());
  const WeightFormat format = ref.info->dtype == DType::F32    ? WeightFormat::F32
                              : ref.info->dtype == DType::BF16 ? WeightFormat::BF16
                                                               : WeightFormat::F16;
  std::vector<float> out(n);
  cpu::dequantize_row(WeightView{format, raw.data(), 1, n, nullptr}, 0, out.data());
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i])) fail("tensor '{}': element {} is NaN or Inf; the checkpoint is damaged", ref.info->name, i);
  return out;
}

SpineVector SpineLoader::upload(const std::vector<float>& values) {
  SpineVector v;
  const int64_t n = static_cast<int64_t>(values.size());
  v.buffer = backend_.allocate(4 * values.size());
  backend_.upload(values.data(), *v.buffer, 0, 4 * values.size());
  v.tensor = Tensor::of(*v.buffer, 1, n);
  bytes_ += 4 * values.size();
  return v;
}

}  // namespace deltafin
