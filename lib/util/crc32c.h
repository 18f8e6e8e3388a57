// CRC-32C (Castagnoli), the checksum of TFRecord framing; computed by Intel's ISA-L (libisal).
#pragma once
#include <cstddef>
#include <cstdint>

namespace spmd {

uint32_t crc32c(const void* data, size_t size);  // crc32c("123456789") == 0xE3069283

}  // namespace spmd
