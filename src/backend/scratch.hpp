// Activations of one pass: tensors taken from backend buffers in stack order. mark() and
// release() give back what a layer took, so a pass needs the room of its largest layer, not of
// all of them; reset() gives back everything between passes. Reuse is safe on every backend
// because commands run in order on one stream. A pass that needs more than the buffers hold
// gets another; reset() then merges them into one, so steady decoding allocates nothing.
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
  };

  explicit Scratch(Backend& backend) : backend_(backend) {}

  // A dense tensor [rows, cols], 256-byte aligned.
  Tensor take(int64_t rows, int64_t cols, Elem elem = Elem::F32);
  Mark mark() const { return at_; }
  void release(const Mark& mark) { at_ = mark; }
  void reset();

 private:
  Backend& backend_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Mark at_;            // the next free byte
};

}  // namespace deltafin
