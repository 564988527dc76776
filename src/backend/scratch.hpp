// Activations of one pass: tensors taken from backend buffers in stack order. mark() and
// release() give back what a layer took, so a pass needs the room of its largest layer, not of
// all of them; reset() gives back everything between passes. Reuse is safe on every backend
// because commands run in order on one stream. A pass that needs more than the buffers hold
// gets another; reset() then replaces them by one as large as that pass's high-water mark, so
// steady decoding allocates nothing and the scratch holds what its largest pass needed.
// peak() is the high-water mark of bytes in use (tensors and their alignment) since the last
// reset_peak(), as one buffer would hold them (the memory plan's pass activations are checked
// against it, tests/test_pass_activations.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "backend/backend.hpp"

namespace deltafin {

class Scratch {
 public:
  struct Mark {
    size_t buffer = 0;
    uint64_t used = 0;
    uint64_t before = 0;  // bytes in use in the buffers before `buffer`
  };

  explicit Scratch(Backend& backend) : backend_(backend) {}

  // A dense tensor [rows, cols], 256-byte aligned.
  Tensor take(int64_t rows, int64_t cols, Elem elem = Elem::F32);
  Mark mark() const { return at_; }
  void release(const Mark& mark) { at_ = mark; }
  void reset();
  uint64_t peak() const { return peak_; }
  void reset_peak() { peak_ = 0; }

 private:
  Backend& backend_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Mark at_;            // the next free byte
  uint64_t peak_ = 0;
  uint64_t pass_peak_ = 0;  // since the last reset()
};

}  // namespace deltafin
