// libFuzzer target for the safetensors header parser. The input is a whole file: an 8-byte
// little-endian header length N, then N bytes of JSON, then data. Only deltafin::Error is caught;
// anything else (another exception, a sanitizer report, a broken invariant below) crashes so the
// fuzzer records it. On success the promises of parse_safetensors_header are re-checked here.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "util/error.hpp"
#include "weights/safetensors.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void check_invariants(const deltafin::SafetensorsHeader& h, uint64_t file_size, size_t n) {
  require(h.file_size == file_size);
  require(h.data_start == 8 + n);
  std::unordered_set<std::string_view> names;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const deltafin::TensorInfo& t : h.tensors) {
    require(names.insert(t.name).second);
    require(t.offset >= h.data_start && t.offset <= file_size);
    require(t.nbytes <= file_size - t.offset);
    const int64_t numel = t.numel();
    require(numel >= 0);
    require(t.nbytes == static_cast<uint64_t>(numel) * deltafin::dtype_size(t.dtype));
    if (t.nbytes > 0) ranges.emplace_back(t.offset, t.offset + t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) require(ranges[i - 1].second <= ranges[i].first);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;  // read_safetensors_header rejects these before parsing
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 8, size - 8);
  if (n > rest.size()) {
    // read_safetensors_header refuses this before parsing; parse_safetensors_header must refuse
    // a header that does not fit the file size it is given.
    bool threw = false;
    try {
      deltafin::parse_safetensors_header(rest, size - 1, "fuzz.safetensors");
    } catch (const deltafin::Error&) {
      threw = true;
    }
    require(threw);
    return 0;
  }
  const std::string_view json = rest.substr(0, static_cast<size_t>(n));
  try {
    const deltafin::SafetensorsHeader h =
        deltafin::parse_safetensors_header(json, size, "fuzz.safetensors");
    check_invariants(h, size, json.size());
  } catch (const deltafin::Error&) {
  }
  return 0;
}
