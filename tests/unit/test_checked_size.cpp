// Sizes from files never wrap around: the overflow-checked helpers, and a safetensors header whose
// shape's element count passes 2^63 (which once read as "shape of 0 floats").
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "ckpt/safetensors.h"
#include "test_support.h"
#include "usage_error.h"
#include "util/checked_size.h"

using namespace spmd::test;

namespace {
// A safetensors file: the header's length (8 bytes, little-endian), the header, `data_bytes` zeros.
void write_safetensors(const std::string& path, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_file(path, bytes + header + std::string(data_bytes, '\0'));
}
}  // namespace

TEST_CASE("checked size: products and sums that fit are exact, those past 2^63 are refused") {
  CHECK(spmd::checked_mul(int64_t{1} << 31, int64_t{1} << 31) == int64_t{1} << 62);
  CHECK_FALSE(spmd::checked_mul(int64_t{1} << 62, int64_t{1} << 62).has_value());
  CHECK_FALSE(spmd::checked_mul(int64_t{1} << 62, 4).has_value());
  CHECK(spmd::checked_add(INT64_MAX - 1, 1) == INT64_MAX);
  CHECK_FALSE(spmd::checked_add(INT64_MAX, 1).has_value());
  CHECK(spmd::checked_element_count({}, "x") == 1);
  CHECK(spmd::checked_element_count({3, 0, 5}, "x") == 0);
  CHECK(usage_error_of([] { spmd::checked_element_count({2, -1}, "f.bin: t"); }) ==
        "f.bin: t: shape [2, -1] has a negative dimension");
  CHECK(usage_error_of([] { spmd::checked_byte_count(int64_t{1} << 62, 4, "f.bin: t"); }).find("more than 2^63 bytes") !=
        std::string::npos);
}

TEST_CASE("checked size: a safetensors shape of 2^62 x 2^62 is refused naming the file, the tensor and the shape") {
  TempDir dir;
  const std::string path = dir.file("huge.safetensors");
  write_safetensors(path, R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4611686018427387904], "data_offsets": [0, 0]}})", 0);
  const std::string msg = usage_error_of([&] { spmd::SafetensorsFile file(path); });
  CHECK(msg == path + ": tensor 'w': shape [4611686018427387904, 4611686018427387904] has more than 2^63 elements");
  write_safetensors(path, R"({"w": {"dtype": "F32", "shape": [-2, 3], "data_offsets": [0, 0]}})", 0);
  CHECK(usage_error_of([&] { spmd::SafetensorsFile file(path); }) == path + ": tensor 'w': shape [-2, 3] has a negative dimension");
  write_safetensors(path, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})", 24);
  const std::vector<int64_t> shape{2, 3};
  CHECK(spmd::SafetensorsFile(path).entries().at("w").shape == shape);
}
