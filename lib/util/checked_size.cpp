// Overflow-checked size arithmetic for the readers of untrusted files.
#include "util/checked_size.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

int64_t checked_element_count(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t count = 1;
  for (const int64_t dim : shape) {
    if (dim < 0) throw UsageError(fmt::format("{}: shape [{}] has a negative dimension", what, fmt::join(shape, ", ")));
    const auto next = checked_mul(count, dim);
    if (!next) throw UsageError(fmt::format("{}: shape [{}] has more than 2^63 elements", what, fmt::join(shape, ", ")));
    count = *next;
  }
  return count;
}

int64_t checked_byte_count(int64_t count, int64_t element_bytes, const std::string& what) {
  const auto bytes = checked_mul(count, element_bytes);
  if (!bytes) throw UsageError(fmt::format("{}: {} elements of {} bytes are more than 2^63 bytes", what, count, element_bytes));
  return *bytes;
}

}  // namespace spmd
