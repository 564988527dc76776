// Safetensors header parsing with simdjson's DOM API, used through error codes only: no simdjson
// exception ever escapes, every failure becomes a deltafin::Error. Invariants on success: tensor
// names are unique, every dtype is known, every shape has non-negative dims whose product fits in
// int64, nbytes == numel * dtype_size, each tensor's bytes lie inside [data_start, file_size), and
// no two non-empty tensors share a byte. Messages are one line: names and paths that come from the
// file are quoted with control characters escaped and long names cut short.
#include "weights/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <system_error>
#include <unordered_set>

#include "util/error.hpp"
#include "util/input_file.hpp"

namespace deltafin {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // real headers are a few MB at most
constexpr size_t kMaxNameInMessage = 200;
constexpr size_t kMaxDimsInMessage = 16;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// `s` made safe for a one-line message: C0/C1 controls, DEL and U+2028/U+2029 escaped; cut at
// `max_bytes` (on a UTF-8 boundary) with "..." appended.
std::string printable(std::string_view s, size_t max_bytes = kMaxNameInMessage) {
  bool cut = false;
  if (s.size() > max_bytes) {
    size_t n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    s = s.substr(0, n);
    cut = true;
  }
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xA0 &&
               static_cast<unsigned char>(s[i + 1]) >= 0x80) {  // U+0080..U+009F
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
      ++i;
    } else if (c == 0xE2 && s.substr(i, 3) == "\xE2\x80\xA8") {
      out += "\\u2028";
      i += 2;
    } else if (c == 0xE2 && s.substr(i, 3) == "\xE2\x80\xA9") {
      out += "\\u2029";
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (cut) out += "...";
  return out;
}

std::string_view kind_of(element_type t) {
  switch (t) {
    case element_type::ARRAY: return "an array";
    case element_type::OBJECT: return "an object";
    case element_type::INT64:
    case element_type::UINT64: return "an integer";
    case element_type::DOUBLE: return "a non-integer number";
    case element_type::STRING: return "a string";
    case element_type::BOOL: return "a boolean";
    case element_type::NULL_VALUE: return "null";
  }
  return "an unknown JSON value";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i == kMaxDimsInMessage) {
      out += fmt::format(", ... ({} dims)", shape.size());
      break;
    }
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// Validates one header, holding what every message needs.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, uint64_t file_size, uint64_t data_start)
      : where_(printable(path, 4096)), file_size_(file_size), data_start_(data_start) {}

  template <typename... Args>
  [[noreturn]] void fail_file(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: {}", where_, fmt::format(format, std::forward<Args>(args)...));
  }

  template <typename... Args>
  [[noreturn]] void fail_tensor(std::string_view name, fmt::format_string<Args...> format,
                                Args&&... args) const {
    fail("{}: tensor '{}': {}", where_, printable(name),
         fmt::format(format, std::forward<Args>(args)...));
  }

  // A JSON integer >= 0 (what = "shape[1]", "data_offsets[0]", ...).
  uint64_t non_negative(std::string_view name, element e, std::string_view what) const {
    switch (e.type()) {
      case element_type::INT64: {
        int64_t v = 0;
        if (e.get(v) != simdjson::SUCCESS) break;
        if (v < 0) fail_tensor(name, "{} is negative ({})", what, v);
        return static_cast<uint64_t>(v);
      }
      case element_type::UINT64: {
        uint64_t v = 0;
        if (e.get(v) != simdjson::SUCCESS) break;
        return v;
      }
      case element_type::DOUBLE: {
        double v = 0;
        if (e.get(v) != simdjson::SUCCESS) break;
        fail_tensor(name, "{} is not an integer ({} is written as a floating-point number)",
                    what, v);
      }
      default:
        break;
    }
    fail_tensor(name, "{} is {}, expected a non-negative integer", what, kind_of(e.type()));
  }

  simdjson::dom::array array_field(std::string_view name, element e, std::string_view field) const {
    simdjson::dom::array a;
    if (e.get(a) != simdjson::SUCCESS)
      fail_tensor(name, "\"{}\" is {}, expected an array", field, kind_of(e.type()));
    return a;
  }

  TensorInfo tensor(std::string_view name, element value) const {
    simdjson::dom::object entry;
    if (value.get(entry) != simdjson::SUCCESS)
      fail_tensor(name, "entry is {}, expected an object with dtype, shape and data_offsets",
                  kind_of(value.type()));

    // Fields by hand rather than entry["dtype"], so that a repeated field is caught; unknown
    // fields are ignored, as the reference implementation does.
    constexpr std::string_view kFields[3] = {"dtype", "shape", "data_offsets"};
    element fields[3];
    bool present[3] = {false, false, false};
    for (simdjson::dom::key_value_pair field : entry) {
      for (int f = 0; f < 3; ++f) {
        if (field.key != kFields[f]) continue;
        if (present[f]) fail_tensor(name, "field \"{}\" appears more than once", kFields[f]);
        present[f] = true;
        fields[f] = field.value;
      }
    }
    for (int f = 0; f < 3; ++f)
      if (!present[f]) fail_tensor(name, "missing \"{}\"", kFields[f]);
    const element dtype_el = fields[0], shape_el = fields[1], offsets_el = fields[2];

    TensorInfo t;
    t.name = std::string(name);

    std::string_view dtype_text;
    if (dtype_el.get(dtype_text) != simdjson::SUCCESS)
      fail_tensor(name, "\"dtype\" is {}, expected a string such as \"BF16\"",
                  kind_of(dtype_el.type()));
    const std::optional<DType> dtype = parse_dtype(dtype_text);
    if (!dtype) fail_tensor(name, "unknown dtype '{}'", printable(dtype_text, 64));
    t.dtype = *dtype;

    // Element count, checked for overflow; a zero dim makes it 0 whatever the others are.
    uint64_t numel = 1;
    bool overflow = false, has_zero = false;
    size_t i = 0;
    for (element dim : array_field(name, shape_el, "shape")) {
      const uint64_t d = non_negative(name, dim, fmt::format("shape[{}]", i++));
      if (d > kInt64Max) fail_tensor(name, "shape[{}] is too large ({})", i - 1, d);
      t.shape.push_back(static_cast<int64_t>(d));
      has_zero |= d == 0;
      if (!overflow && __builtin_mul_overflow(numel, d, &numel)) overflow = true;
    }
    if (has_zero) numel = 0;
    uint64_t need = 0;
    if ((!has_zero && (overflow || numel > kInt64Max)) ||
        __builtin_mul_overflow(numel, dtype_size(t.dtype), &need))
      fail_tensor(name, "shape {} has too many elements for a 64-bit byte count",
                  shape_text(t.shape));

    simdjson::dom::array offsets = array_field(name, offsets_el, "data_offsets");
    if (offsets.size() != 2)
      fail_tensor(name, "\"data_offsets\" has {} elements, expected 2 ([begin, end])",
                  offsets.size());
    element begin_el, end_el;
    if (offsets.at(0).get(begin_el) != simdjson::SUCCESS ||
        offsets.at(1).get(end_el) != simdjson::SUCCESS)
      fail_tensor(name, "\"data_offsets\" cannot be read");
    const uint64_t begin = non_negative(name, begin_el, "data_offsets[0]");
    const uint64_t end = non_negative(name, end_el, "data_offsets[1]");
    if (begin > end) fail_tensor(name, "data_offsets [{}, {}] are reversed", begin, end);
    const uint64_t data_bytes = file_size_ - data_start_;
    if (end > data_bytes)
      fail_tensor(name,
                  "data_offsets [{}, {}] run past the end of the file (data region is {} bytes, "
                  "file size {}); the file is truncated or the header is wrong",
                  begin, end, data_bytes, file_size_);
    t.offset = data_start_ + begin;
    t.nbytes = end - begin;
    if (t.nbytes != need)
      fail_tensor(name, "data_offsets [{}, {}] hold {} bytes but {} {} needs {}", begin, end,
                  t.nbytes, dtype_name(t.dtype), shape_text(t.shape), need);
    return t;
  }

  void metadata(element value, SafetensorsHeader& header) const {
    simdjson::dom::object object;
    if (value.get(object) != simdjson::SUCCESS)
      fail_file("\"__metadata__\" is {}, expected an object of strings", kind_of(value.type()));
    for (simdjson::dom::key_value_pair kv : object) {
      std::string_view text;
      if (kv.value.get(text) != simdjson::SUCCESS)
        fail_file("\"__metadata__\" value for '{}' is {}, expected a string", printable(kv.key),
                  kind_of(kv.value.type()));
      header.metadata.emplace_back(std::string(kv.key), std::string(text));
    }
  }

  // Sorting the non-empty tensors by begin, each must start at or after the previous one's end.
  void check_overlaps(const std::vector<TensorInfo>& tensors) const {
    std::vector<const TensorInfo*> order;
    for (const TensorInfo& t : tensors)
      if (t.nbytes > 0) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return a->offset < b->offset;
    });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& a = *order[i - 1];
      const TensorInfo& b = *order[i];
      if (b.offset < a.offset + a.nbytes) {
        const uint64_t a0 = a.offset - data_start_, b0 = b.offset - data_start_;
        fail_file("tensors '{}' (data_offsets [{}, {}]) and '{}' (data_offsets [{}, {}]) overlap",
                  printable(a.name), a0, a0 + a.nbytes, printable(b.name), b0, b0 + b.nbytes);
      }
    }
  }

 private:
  std::string where_;
  uint64_t file_size_;
  uint64_t data_start_;
};

// Reads exactly `size` bytes at `offset`, retrying short reads and EINTR.
void read_exact(int fd, char* dst, size_t size, uint64_t offset, const std::string& where,
                std::string_view what) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, dst, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: read error in {}: {}", where, what,
           std::error_code(errno, std::generic_category()).message());
    }
    if (n == 0)
      fail("{}: unexpected end of file while reading {} (did the file shrink?)", where, what);
    dst += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

// Product of the dims; 0 if any dim is 0; -1 for a negative dim or an int64 overflow (neither can
// come out of parse_safetensors_header).
int64_t TensorInfo::numel() const {
  uint64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d == 0) return 0;
    if (d < 0) return -1;
    overflow = overflow || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
  }
  return overflow || n > kInt64Max ? -1 : static_cast<int64_t>(n);
}

SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t file_size,
                                           const std::string& path) {
  SafetensorsHeader header;
  header.path = path;
  header.file_size = file_size;
  if (file_size < 8 || json.size() > file_size - 8)
    fail("{}: header length {} runs past the end of the file (size {})", printable(path, 4096),
         json.size(), file_size);
  header.data_start = 8 + json.size();
  const HeaderParser p(path, file_size, header.data_start);

  const simdjson::padded_string padded(json.data(), json.size());
  simdjson::dom::parser parser;
  element root;
  if (const simdjson::error_code error = parser.parse(padded).get(root))
    p.fail_file("broken JSON header: {}", simdjson::error_message(error));
  simdjson::dom::object top;
  if (root.get(top) != simdjson::SUCCESS)
    p.fail_file("the JSON header is {}, expected an object mapping tensor names to entries",
                kind_of(root.type()));

  // simdjson keeps duplicate keys, so uniqueness is checked here. The views point into the
  // parser's string buffer, which lives until the end of this function.
  std::unordered_set<std::string_view> seen;
  for (simdjson::dom::key_value_pair kv : top) {
    if (!seen.insert(kv.key).second) {
      if (kv.key == "__metadata__") p.fail_file("\"__metadata__\" appears more than once");
      p.fail_tensor(kv.key, "the name appears more than once in the header");
    }
    if (kv.key == "__metadata__")
      p.metadata(kv.value, header);
    else
      header.tensors.push_back(p.tensor(kv.key, kv.value));
  }
  p.check_overlaps(header.tensors);
  return header;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const std::string where = printable(path, 4096);
  require_regular_file(path, "the shard");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail("{}: cannot open: {}", where, std::error_code(errno, std::generic_category()).message());
  const FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0)
    fail("{}: cannot stat: {}", where, std::error_code(errno, std::generic_category()).message());
  if (S_ISDIR(st.st_mode)) fail("{}: is a directory, not a safetensors file", where);
  if (!S_ISREG(st.st_mode)) fail("{}: is not a regular file", where);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8)
    fail("{}: file is truncated ({} bytes); a safetensors file starts with an 8-byte header "
         "length",
         where, size);

  unsigned char prefix[8];
  read_exact(fd, reinterpret_cast<char*>(prefix), 8, 0, where, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > size - 8)
    fail("{}: header length {} runs past the end of the file (size {})", where, n, size);
  if (n > kMaxHeaderBytes)
    fail("{}: header length {} is over the {} MiB limit; the file is damaged or not safetensors",
         where, n, kMaxHeaderBytes >> 20);

  std::string json(n, '\0');
  read_exact(fd, json.data(), n, 8, where, "the JSON header");
  return parse_safetensors_header(json, size, path);
}

}  // namespace deltafin
