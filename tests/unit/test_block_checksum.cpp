// The checksum a checkpoint index records per tensor block: CRC-32C now, and the 64-bit FNV-1a of
// earlier checkpoints still accepted, each against an independent computation.
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "ckpt/safetensors.h"

#include "doctest_check.h"

TEST_CASE("checksum: blocks are recorded as CRC-32C, and earlier FNV-1a records still verify") {
  const std::string check = "123456789";  // the CRC catalogue's check input
  CHECK(spmd::block_checksum(check.data(), check.size()) == "crc32c:e3069283");

  // 64-bit FNV-1a, written out here from its definition (offset basis, prime).
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : check) h = (h ^ c) * 0x100000001b3ull;
  const std::string legacy = fmt::format("{:016x}", h);
  CHECK(legacy == "06d5573923c6cdfc");  // the same computed in Python with unbounded integers, masked to 64 bits

  CHECK(spmd::checksum_matches("crc32c:e3069283", check.data(), check.size()));
  CHECK(spmd::checksum_matches(legacy, check.data(), check.size()));
  const std::string flipped = "123456788";
  CHECK_FALSE(spmd::checksum_matches("crc32c:e3069283", flipped.data(), flipped.size()));
  CHECK_FALSE(spmd::checksum_matches(legacy, flipped.data(), flipped.size()));
  CHECK_FALSE(spmd::checksum_matches("crc32c:", check.data(), check.size()));
}
