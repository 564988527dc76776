// SpineLoader (see spine.hpp).
#include "model/spine.hpp"

#include <cmath>

#include "cpu/matmul.hpp"
#include "io/landing.hpp"
#include "util/aligned_buffer.hpp"
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

SpineLoader::Staged SpineLoader::stage(const TensorRef& ref, int role) {
  Staged s;
  s.role = role;
  const uint64_t bytes = s.bytes = ref.info->nbytes;
  try {
    s.buffer = backend_.allocate(bytes);
    std::unique_ptr<Buffer>& staging = staging_[role];
    if (needs_staging(*s.buffer) && (!staging || staging->bytes() < bytes)) {
      staging.reset();
      staging = backend_.allocate_host(bytes);
    }
  } catch (const std::bad_alloc&) {
    out_of_memory(*ref.info);
  }
  const Landing landing(*s.buffer, 0, bytes, staging_[role].get());
  index_.read(ref, landing.host());
  s.host = landing.host();
  return s;
}

std::unique_ptr<Buffer> SpineLoader::commit(Staged s) {
  Landing(*s.buffer, 0, s.bytes, staging_[s.role].get()).finish(backend_);
  bytes_ += s.buffer->bytes();
  return std::move(s.buffer);
}

// Checked for NaN and Inf on the host, before upload.
SpineMatrix SpineLoader::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const MatrixRef ref = index_.matrix(name, rows, cols);
  if (stream_ && stream_->streamed(unit_)) return streamed(ref);
  Staged data = stage(ref.weight, 0), scales;
  if (ref.scale.info) scales = stage(ref.scale, 1);
  require_finite(WeightView{ref.format, data.host, rows, cols, scales.host}, ref.weight.info->name,
                 ref.scale.info ? ref.scale.info->name : "");
  SpineMatrix m;
  m.data = commit(std::move(data));
  m.weight = {ref.format, rows, cols, m.data.get(), 0, nullptr, 0};
  if (ref.scale.info) {
    m.scales = commit(std::move(scales));
    m.weight.scales = m.scales.get();
  }
  return m;
}

// Where the stream puts the matrix (spine_stream.hpp); it reads the bytes each pass.
SpineMatrix SpineLoader::streamed(const MatrixRef& ref) {
  SpineMatrix m;
  try {
    StreamedMatrix placed = stream_->add(unit_, ref);
    m.data = std::move(placed.data), m.scales = std::move(placed.scales), m.weight = placed.weight;
  } catch (const std::bad_alloc&) {
    out_of_memory(*ref.weight.info);
  }
  bytes_ += ref.bytes();
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
