// See finite_check.hpp.
#include "weights/finite_check.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "util/error.hpp"

namespace deltafin {
namespace {

// First index i < n whose u8, u16 or u32 element has all of `mask` set, or -1. A plain loop the
// compiler vectorises: the check runs at memory speed over the spine.
template <class T>
int64_t first_with_mask(const void* data, int64_t n, T mask) {
  const auto* p = static_cast<const unsigned char*>(data);
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    // An integer count (not a bool or) is what GCC vectorises; 16 bits hold a block's 4096.
    using Count = std::conditional_t<sizeof(T) < 2, uint16_t, T>;
    Count hits = 0;
    for (int64_t i = b; i < e; ++i) {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      hits += static_cast<Count>((v & mask) == mask);
    }
    if (hits == 0) continue;
    for (int64_t i = b; i < e; ++i) {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      if ((v & mask) == mask) return i;
    }
  }
  return -1;
}

std::optional<NonFinite> found(bool in_scales, int64_t index) {
  if (index < 0) return std::nullopt;
  return NonFinite{in_scales, index};
}

}  // namespace

std::optional<NonFinite> find_non_finite(const WeightView& w) {
  const int64_t n = w.rows * w.cols;
  switch (w.format) {
    case WeightFormat::F32: return found(false, first_with_mask<uint32_t>(w.data, n, 0x7f800000u));
    case WeightFormat::F16: return found(false, first_with_mask<uint16_t>(w.data, n, 0x7c00));
    case WeightFormat::BF16: return found(false, first_with_mask<uint16_t>(w.data, n, 0x7f80));
    case WeightFormat::F8_E4M3_BLOCK128: {
      if (auto d = found(false, first_with_mask<uint8_t>(w.data, n, 0x7f))) return d;
      return found(true, first_with_mask<uint32_t>(w.scales, ((w.rows + 127) / 128) * w.scale_cols(), 0x7f800000u));
    }
    case WeightFormat::MXFP4:  // E2M1 codes are all finite; E8M0 255 is NaN
      return found(true, first_with_mask<uint8_t>(w.scales, w.rows * w.group_cols(), 0xff));
    case WeightFormat::INT4_G32:
      return found(true, first_with_mask<uint16_t>(w.scales, w.rows * w.group_cols(), 0x7f80));
  }
  return std::nullopt;
}

void require_finite(const WeightView& w, const std::string& weight_name, const std::string& scale_name) {
  const auto bad = find_non_finite(w);
  if (!bad) return;
  const int64_t cols = bad->in_scales ? (w.format == WeightFormat::F8_E4M3_BLOCK128 ? w.scale_cols() : w.group_cols()) : w.cols;
  fail("tensor '{}': element [{}, {}] is NaN or Inf; the checkpoint is damaged",
       bad->in_scales ? scale_name : weight_name, bad->index / cols, bad->index % cols);
}

}  // namespace deltafin
