// Resident ("spine") weights: everything but the routed experts, read once at load in their
// stored formats into backend buffers (io/landing.hpp: straight into them where the host can
// write them, else through pinned staging memory reused from tensor to tensor).
// Every tensor is checked for NaN and Inf as it loads. With a SpineStream, the matrices of a
// streamed unit (begin_unit) get their place from the stream, which reads them every pass
// (io/spine_stream.hpp). Norm weights, the router's correction bias and K3's small parameters are
// widened to fp32 vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "io/spine_stream.hpp"
#include "util/aligned_buffer.hpp"
#include "weights/weight_index.hpp"

namespace deltafin {

struct SpineMatrix {
  std::unique_ptr<Buffer> data, scales;  // none where the weight lies in a streamed unit's window slot
  Weight weight;
};

// An fp32 vector as a [1, n] tensor (tensor.buffer is nullptr when absent).
struct SpineVector {
  std::unique_ptr<Buffer> buffer;
  Tensor tensor;
};

// Loads a model's spine into one backend, counting the bytes it holds.
class SpineLoader {
 public:
  SpineLoader(Backend& backend, const WeightIndex& index, SpineStream* stream = nullptr)
      : backend_(backend), index_(index), stream_(stream) {}

  // The unit (memory_plan.hpp: 0 the embedding, l + 1 layer l, layers + 1 the head) whose
  // tensors load next.
  void begin_unit(int64_t unit) { unit_ = unit; }

  // `name` [rows, cols] (".weight" and scales added as the format needs); throws naming file
  // and tensor when absent or inconsistent.
  SpineMatrix matrix(const std::string& name, int64_t rows, int64_t cols);
  // A float vector of n elements.
  SpineVector vector(const std::string& name, int64_t n) { return upload(floats(name, {{n}})); }
  // A float tensor whose shape is one of `shapes`, widened to fp32 on the host (for parameters
  // the loader combines before upload).
  std::vector<float> floats(const std::string& name, const std::vector<std::vector<int64_t>>& shapes) const;
  SpineVector upload(const std::vector<float>& values);

  uint64_t bytes() const { return bytes_; }
  const WeightIndex& index() const { return index_; }

 private:
  // A tensor read into host memory (landing.hpp): the backend buffer itself when the host can
  // write it, else staging_[role] (0: data, 1: scales), which commit() uploads.
  struct Staged {
    std::unique_ptr<Buffer> buffer;
    const std::byte* host = nullptr;
    uint64_t bytes = 0;
    int role = 0;
  };
  Staged stage(const TensorRef& ref, int role);
  SpineMatrix streamed(const MatrixRef& ref);
  std::unique_ptr<Buffer> commit(Staged staged);

  Backend& backend_;
  const WeightIndex& index_;
  SpineStream* stream_;
  int64_t unit_ = -1;
  uint64_t bytes_ = 0;
  std::unique_ptr<Buffer> staging_[2];  // pinned host memory, grown to the largest tensor staged
};

}  // namespace deltafin
