// Scratch (see scratch.hpp).
#include "backend/scratch.hpp"

#include <algorithm>

namespace deltafin {

void Scratch::reset() {
  if (buffers_.size() > 1) {  // one buffer for the most the last pass held at once (more than the first held)
    buffers_.clear();
    buffers_.push_back(backend_.allocate(pass_peak_));
  }
  at_ = {};
  pass_peak_ = 0;
}

Tensor Scratch::take(int64_t rows, int64_t cols, Elem elem) {
  const uint64_t bytes = (static_cast<uint64_t>(rows * cols) * 4 + 255) / 256 * 256;
  while (at_.buffer < buffers_.size() && at_.used + bytes > buffers_[at_.buffer]->bytes()) {
    at_ = {at_.buffer + 1, 0, at_.before + at_.used};  // the rest of this buffer stays unused
  }
  if (at_.buffer == buffers_.size()) {
    const uint64_t last = buffers_.empty() ? 0 : buffers_.back()->bytes();
    buffers_.push_back(backend_.allocate(std::max<uint64_t>({bytes, last, 1 << 20})));
  }
  Tensor t = Tensor::of(*buffers_[at_.buffer], rows, cols, elem, at_.used);
  at_.used += bytes;
  pass_peak_ = std::max(pass_peak_, at_.before + at_.used);
  peak_ = std::max(peak_, pass_peak_);
  return t;
}

}  // namespace deltafin
