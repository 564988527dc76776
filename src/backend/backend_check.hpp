// Every op of a device backend against a reference backend (the CPU) on the same synthetic data,
// by normalised error: what `deltafin metal-selftest` runs on a Mac (the tests run it on the
// emulated Metal backend). The parity harness (tests/test_backend_ops.cpp) is the full check
// against the reference twins; this is its self-contained field version.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace deltafin {

struct OpCheck {
  std::string op;    // e.g. "matmul MXFP4"
  double nmse = 0;   // sum (device - reference)^2 / sum reference^2
  double bound = 0;  // four times the parity harness's bound against double (two fp32 results)
  bool pass() const { return nmse <= bound; }
};

std::vector<OpCheck> check_ops(Backend& device, Backend& reference);

}  // namespace deltafin
