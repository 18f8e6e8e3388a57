// CRC-32C through ISA-L's crc32_iscsi, which neither pre- nor post-inverts: we do both, as the
// standard (RFC 3720) CRC-32C does.
#include "util/crc32c.h"

#include <climits>

#include <isa-l/crc.h>

namespace spmd {

uint32_t crc32c(const void* data, size_t size) {
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L only reads it
  uint32_t crc = 0xFFFFFFFFu;
  while (size > 0) {  // its length is an int
    const int chunk = size > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(size);
    crc = crc32_iscsi(bytes, chunk, crc);
    bytes += chunk;
    size -= static_cast<size_t>(chunk);
  }
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace spmd
