// .npy reading and writing (see npy.hpp).
#include "util/npy.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "util/atomic_file.hpp"
#include "util/error.hpp"

namespace deltafin {

std::string npy_f32_bytes(const std::vector<int64_t>& shape, const float* data) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ",";
    count *= d;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const uint16_t len = static_cast<uint16_t>(header.size());
  std::string out("\x93NUMPY\x01\x00", 8);
  out.append(reinterpret_cast<const char*>(&len), 2);
  out += header;
  out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * 4);
  return out;
}

void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  write_file_atomically(path, npy_f32_bytes(shape, data));
}

NpyArray read_npy_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  char magic[10];
  if (!in.read(magic, 10) || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail("{}: not a .npy file", path);
  uint16_t len;
  std::memcpy(&len, magic + 8, 2);
  std::string header(len, '\0');
  if (!in.read(header.data(), len)) fail("{}: truncated header", path);
  if (header.find("'<f4'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos)
    fail("{}: expected little-endian float32 in C order", path);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)"))) fail("{}: no shape", path);
  NpyArray a;
  int64_t count = 1;
  const std::string dims = m[1];
  for (size_t i = 0; i < dims.size();) {
    size_t j = dims.find(',', i);
    if (j == std::string::npos) j = dims.size();
    const std::string d = dims.substr(i, j - i);
    if (d.find_first_not_of(' ') != std::string::npos) {
      a.shape.push_back(std::stoll(d));
      count *= a.shape.back();
    }
    i = j + 1;
  }
  a.data.resize(count);
  if (!in.read(reinterpret_cast<char*>(a.data.data()), count * 4)) fail("{}: truncated data", path);
  return a;
}

}  // namespace deltafin
