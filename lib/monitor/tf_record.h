// TFRecord framing, the container of TensorBoard's event files: each record is
//   uint64 length | uint32 masked_crc32c(length) | payload | uint32 masked_crc32c(payload)
// all little-endian. The mask keeps a CRC stored next to its own data from checksumming well.
#pragma once
#include <cstdint>
#include <string>

namespace spmd {

uint32_t masked_crc32c(const void* data, size_t size);
// The framed record for `payload`, ready to append to a file.
std::string frame_record(const std::string& payload);

}  // namespace spmd
