// Sizes read from a file (shapes, lengths, offsets), multiplied and added without wrapping around:
// a product past 2^63 is the file's error, never a small number that happens to fit. Every reader
// that computes a size from a file's numbers goes through these.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spmd {

// a * b and a + b, or nullopt where the result would not fit in an int64_t.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
std::optional<int64_t> checked_add(int64_t a, int64_t b);

// The number of elements of `shape`. UsageError "<what>: shape [...] has a negative dimension" or
// "... has more than 2^63 elements" otherwise (`what` names the file and the tensor).
int64_t checked_element_count(const std::vector<int64_t>& shape, const std::string& what);

// count * element_bytes, with the same error.
int64_t checked_byte_count(int64_t count, int64_t element_bytes, const std::string& what);

}  // namespace spmd
