// TensorBoard's record framing: CRC-32C against published vectors, the framed layout, and the
// event writer's file (complete records only, nothing written between flushes).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "test_support.h"
#include "monitor/tensorboard_writer.h"
#include "monitor/tf_record.h"
#include "util/crc32c.h"

using namespace spmd;

namespace {
uint64_t read_le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return v;
}

// The payloads of a file of framed records; fails the test on a bad CRC or a torn record.
std::vector<std::string> unframe(const std::string& bytes) {
  std::vector<std::string> payloads;
  size_t at = 0;
  while (at < bytes.size()) {
    REQUIRE(at + 12 <= bytes.size());
    const uint64_t length = read_le(bytes, at, 8);
    REQUIRE(read_le(bytes, at + 8, 4) == masked_crc32c(bytes.data() + at, 8));
    REQUIRE(at + 16 + length <= bytes.size());
    std::string payload = bytes.substr(at + 12, length);
    REQUIRE(read_le(bytes, at + 12 + length, 4) == masked_crc32c(payload.data(), payload.size()));
    payloads.push_back(payload);
    at += 16 + length;
  }
  return payloads;
}

std::string only_file_in(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().string());
  REQUIRE(files.size() == 1);
  return files[0];
}
}  // namespace

TEST_CASE("tensorboard: CRC-32C matches the published check values (RFC 3720 B.4)") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  std::vector<unsigned char> bytes(32, 0);
  CHECK(crc32c(bytes.data(), bytes.size()) == 0x8A9136AAu);
  std::fill(bytes.begin(), bytes.end(), 0xFF);
  CHECK(crc32c(bytes.data(), bytes.size()) == 0x62A8AB43u);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i);
  CHECK(crc32c(bytes.data(), bytes.size()) == 0x46DD794Eu);
}

TEST_CASE("tensorboard: a framed record is length, masked CRC of it, payload, masked CRC of it") {
  CHECK(masked_crc32c("", 0) == 0xA282EAD8u);  // the mask alone: rotate(0) + kMaskDelta
  const std::string payload = "123456789";
  const std::string record = frame_record(payload);
  REQUIRE(record.size() == payload.size() + 16);
  CHECK(read_le(record, 0, 8) == 9);
  CHECK(record.substr(12, 9) == payload);
  const uint32_t crc = 0xE3069283u;
  CHECK(read_le(record, 21, 4) == ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
  CHECK(unframe(record + frame_record("")) == std::vector<std::string>{payload, ""});
}

TEST_CASE("tensorboard: the event file holds the version record, then whole records at each flush") {
  test::TempDir dir;
  std::string path;
  {
    TensorBoardWriter writer(dir.path());
    path = writer.path();
    CHECK(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
    CHECK(path == only_file_in(dir.path()));
    auto records = unframe(test::read_file(path));
    REQUIRE(records.size() == 1);
    CHECK(records[0].find("brain.Event:2") != std::string::npos);
    writer.add_scalars(3, {{"loss", 2.5}, {"lr", 1e-3}});
    CHECK(unframe(test::read_file(path)).size() == 1);  // buffered until a flush
    writer.flush();
    records = unframe(test::read_file(path));
    REQUIRE(records.size() == 2);
    CHECK(records[1].find("loss") != std::string::npos);
    writer.add_scalars(4, {{"loss", 2.25}});
  }  // the destructor flushes
  CHECK(unframe(test::read_file(path)).size() == 3);
}
