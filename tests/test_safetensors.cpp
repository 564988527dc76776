// Safetensors header parsing: a valid file's tensors come back with the right dtype, shape,
// absolute offset and byte count, and every malformed header throws a deltafin::Error whose
// one-line message names the file and, where there is one, the tensor. Files are written to a
// fresh temp dir that is removed afterwards.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>

#include "util/error.hpp"
#include "weights/safetensors.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using deltafin::DType;
using deltafin::Error;
using deltafin::read_safetensors_header;

namespace {

// A directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() /
           ("deltafin-test-st-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

// Writes <len><header json><data_bytes zero bytes> and returns the path as a string.
// `declared_len` overrides the length prefix when given.
std::string write_st(const TempDir& dir, const std::string& name, const std::string& json,
                     uint64_t data_bytes, std::optional<uint64_t> declared_len = std::nullopt) {
  const fs::path file = dir.path / name;
  const uint64_t len = declared_len.value_or(json.size());
  write_bytes(file, le64(len) + json + std::string(data_bytes, '\0'));
  return file.string();
}

}  // namespace

TEST_CASE("safetensors: a valid file parses", "[safetensors]") {
  TempDir dir;
  // Header padded with spaces as real writers do; a BF16 [2, 3] (12 bytes), an F32 scalar
  // (4 bytes), an empty tensor, and metadata.
  std::string json =
      R"({"__metadata__":{"format":"pt","note":"tiny"},)"
      R"("model.layers.0.mlp.gate.weight":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("model.norm.eps":{"dtype":"F32","shape":[],"data_offsets":[12,16]},)"
      R"("model.empty":{"dtype":"F8_E4M3","shape":[0,7],"data_offsets":[16,16]}})";
  json += std::string((8 - json.size() % 8) % 8, ' ');
  const std::string path = write_st(dir, "good.safetensors", json, 16);

  const deltafin::SafetensorsHeader h = read_safetensors_header(path);
  CHECK(h.path == path);
  CHECK(h.data_start == 8 + json.size());
  CHECK(h.file_size == 8 + json.size() + 16);
  REQUIRE(h.tensors.size() == 3);

  const auto& w = h.tensors[0];
  CHECK(w.name == "model.layers.0.mlp.gate.weight");
  CHECK(w.dtype == DType::BF16);
  CHECK(w.shape == std::vector<int64_t>{2, 3});
  CHECK(w.offset == h.data_start);
  CHECK(w.nbytes == 12);
  CHECK(w.numel() == 6);

  const auto& eps = h.tensors[1];
  CHECK(eps.name == "model.norm.eps");
  CHECK(eps.dtype == DType::F32);
  CHECK(eps.shape.empty());
  CHECK(eps.numel() == 1);
  CHECK(eps.offset == h.data_start + 12);
  CHECK(eps.nbytes == 4);

  const auto& empty = h.tensors[2];
  CHECK(empty.dtype == DType::F8_E4M3);
  CHECK(empty.numel() == 0);
  CHECK(empty.nbytes == 0);

  REQUIRE(h.metadata.size() == 2);
  CHECK(h.metadata[0] == std::pair<std::string, std::string>{"format", "pt"});
  CHECK(h.metadata[1] == std::pair<std::string, std::string>{"note", "tiny"});
}

TEST_CASE("safetensors: an empty header has no tensors", "[safetensors]") {
  TempDir dir;
  const auto h = read_safetensors_header(write_st(dir, "empty.safetensors", "{}", 0));
  CHECK(h.tensors.empty());
  CHECK(h.metadata.empty());
  CHECK(h.data_start == 10);
}

TEST_CASE("safetensors: file-level errors name the file", "[safetensors]") {
  TempDir dir;

  SECTION("missing file") {
    const std::string path = (dir.path / "absent.safetensors").string();
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("absent.safetensors") && Contains("cannot open"));
  }
  SECTION("shorter than the length prefix") {
    const fs::path file = dir.path / "short.safetensors";
    write_bytes(file, "abc");
    REQUIRE_THROWS_WITH(read_safetensors_header(file.string()),
                        Contains("short.safetensors") && Contains("truncated (3 bytes)"));
  }
  SECTION("header length past the end") {
    const std::string path = write_st(dir, "long.safetensors", "{}", 0, 1000);
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("long.safetensors") && Contains("header length 1000") &&
                            Contains("past the end of the file (size 10)"));
  }
  SECTION("absurd header length") {
    const std::string path = write_st(dir, "huge.safetensors", "{}", 0, ~uint64_t{0});
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("huge.safetensors") && Contains("past the end"));
  }
  SECTION("header over the 100 MiB limit") {
    // A sparse file: 8-byte prefix claiming 101 MiB, then a hole up to that size.
    const fs::path file = dir.path / "big.safetensors";
    write_bytes(file, le64(uint64_t{101} << 20));
    fs::resize_file(file, (uint64_t{101} << 20) + 8);
    REQUIRE_THROWS_WITH(read_safetensors_header(file.string()),
                        Contains("big.safetensors") && Contains("100 MiB"));
  }
  SECTION("broken JSON") {
    const std::string path = write_st(dir, "broken.safetensors", R"({"a": {"dtype": )", 0);
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("broken.safetensors") && Contains("broken JSON header"));
  }
  SECTION("invalid UTF-8 is broken JSON") {
    const std::string path = write_st(dir, "utf8.safetensors", "{\"\xff\": 1}", 0);
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("utf8.safetensors") && Contains("broken JSON header"));
  }
  SECTION("top level not an object") {
    const std::string path = write_st(dir, "array.safetensors", "[1, 2]", 0);
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("array.safetensors") && Contains("expected an object"));
  }
  SECTION("metadata value not a string") {
    const std::string path =
        write_st(dir, "meta.safetensors", R"({"__metadata__": {"format": 3}})", 0);
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("meta.safetensors") && Contains("'format'") &&
                            Contains("expected a string"));
  }
  SECTION("metadata not an object") {
    const std::string path = write_st(dir, "meta2.safetensors", R"({"__metadata__": "x"})", 0);
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains("meta2.safetensors") && Contains("__metadata__"));
  }
  SECTION("a directory") {
    REQUIRE_THROWS_WITH(read_safetensors_header(dir.path.string()), Contains("directory"));
  }
}

// Each malformed entry must be reported with the file and the tensor name.
TEST_CASE("safetensors: tensor-level errors name the file and tensor", "[safetensors]") {
  TempDir dir;
  const std::string file = "model-00001.safetensors";
  const std::string t = "model.layers.3.mlp.gate.weight";
  auto check = [&](const std::string& json, uint64_t data_bytes, const std::string& expected) {
    const std::string path = write_st(dir, file, json, data_bytes);
    INFO(json);
    REQUIRE_THROWS_AS(read_safetensors_header(path), Error);
    REQUIRE_THROWS_WITH(read_safetensors_header(path),
                        Contains(file) && Contains("'" + t + "'") && Contains(expected));
  };
  auto entry = [&](const std::string& body) { return "{\"" + t + "\": " + body + "}"; };

  SECTION("offsets out of bounds") {
    check(entry(R"({"dtype":"BF16","shape":[4],"data_offsets":[0,8]})"), 4, "past the end");
  }
  SECTION("offsets far out of bounds do not wrap") {
    check(entry(R"({"dtype":"U8","shape":[1],)"
                R"("data_offsets":[18446744073709551614,18446744073709551615]})"),
          4, "past the end");
  }
  SECTION("reversed offsets") {
    check(entry(R"({"dtype":"BF16","shape":[1],"data_offsets":[10,8]})"), 16,
          "data_offsets [10, 8] are reversed");
  }
  SECTION("unknown dtype") {
    check(entry(R"({"dtype":"FP4","shape":[4],"data_offsets":[0,4]})"), 4, "unknown dtype 'FP4'");
  }
  SECTION("byte count disagrees with shape") {
    check(entry(R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]})"), 16,
          "hold 10 bytes but BF16 [2, 3] needs 12");
  }
  SECTION("non-object entry") {
    check(entry("[1, 2, 3]"), 0, "entry is an array");
  }
  SECTION("missing dtype") {
    check(entry(R"({"shape":[1],"data_offsets":[0,1]})"), 1, "missing \"dtype\"");
  }
  SECTION("missing shape") {
    check(entry(R"({"dtype":"U8","data_offsets":[0,1]})"), 1, "missing \"shape\"");
  }
  SECTION("missing data_offsets") {
    check(entry(R"({"dtype":"U8","shape":[1]})"), 1, "missing \"data_offsets\"");
  }
  SECTION("dtype not a string") {
    check(entry(R"({"dtype":7,"shape":[1],"data_offsets":[0,1]})"), 1, "\"dtype\" is an integer");
  }
  SECTION("shape not an array") {
    check(entry(R"({"dtype":"U8","shape":1,"data_offsets":[0,1]})"), 1, "\"shape\" is an integer");
  }
  SECTION("negative dim") {
    check(entry(R"({"dtype":"U8","shape":[2,-1],"data_offsets":[0,1]})"), 1,
          "shape[1] is negative (-1)");
  }
  SECTION("non-integer dim") {
    check(entry(R"({"dtype":"U8","shape":[1.5],"data_offsets":[0,1]})"), 1,
          "shape[0] is not an integer");
  }
  SECTION("string dim") {
    check(entry(R"({"dtype":"U8","shape":["4"],"data_offsets":[0,1]})"), 1, "shape[0] is a string");
  }
  SECTION("shape product overflows") {
    check(entry(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]})"), 1,
          "too many elements");
  }
  SECTION("byte count overflows") {
    check(entry(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,1]})"), 1,
          "too many elements");
  }
  SECTION("data_offsets wrong length") {
    check(entry(R"({"dtype":"U8","shape":[1],"data_offsets":[0,1,2]})"), 2, "has 3 elements");
  }
  SECTION("negative offset") {
    check(entry(R"({"dtype":"U8","shape":[1],"data_offsets":[-1,0]})"), 2,
          "data_offsets[0] is negative");
  }
  SECTION("repeated field") {
    check(entry(R"({"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]})"), 1,
          "field \"dtype\" appears more than once");
  }
  SECTION("duplicate tensor name") {
    const std::string e = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
    check("{\"" + t + "\": " + e + ", \"" + t + "\": " + e + "}", 2, "appears more than once");
  }
  SECTION("overlapping tensors") {
    check("{\"other\": {\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}, \"" + t +
              "\": {\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
          16, "overlap");
  }
}

TEST_CASE("safetensors: adjacent and empty tensors do not overlap", "[safetensors]") {
  TempDir dir;
  const std::string path = write_st(
      dir, "adjacent.safetensors",
      R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
      R"("e":{"dtype":"U8","shape":[0],"data_offsets":[6,6]},)"
      R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
      8);
  const auto h = read_safetensors_header(path);
  REQUIRE(h.tensors.size() == 3);
  CHECK(h.tensors[0].name == "b");  // header order is kept
  CHECK(h.tensors[2].name == "a");
}

TEST_CASE("safetensors: messages stay on one line", "[safetensors]") {
  TempDir dir;
  const std::string path = write_st(
      dir, "newline.safetensors",
      R"({"bad\nname":{"dtype":"NOPE\n","shape":[1],"data_offsets":[0,1]}})", 1);
  try {
    read_safetensors_header(path);
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK_THAT(message, Contains("bad\\x0aname") && Contains("newline.safetensors"));
  }
}

TEST_CASE("safetensors: parse_safetensors_header checks the header fits the file",
          "[safetensors]") {
  CHECK_THROWS_WITH(deltafin::parse_safetensors_header("{}", 5, "x.safetensors"),
                    Contains("x.safetensors") && Contains("past the end"));
  CHECK(deltafin::parse_safetensors_header("{}", 10, "x.safetensors").tensors.empty());
}
