// TFRecord framing (see tf_record.h).
#include "monitor/tf_record.h"

#include "util/crc32c.h"

namespace spmd {

namespace {
void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}
}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;  // TensorFlow's kMaskDelta
}

std::string frame_record(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  append_le(out, payload.size(), 8);
  append_le(out, masked_crc32c(out.data(), 8), 4);
  out += payload;
  append_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

}  // namespace spmd
