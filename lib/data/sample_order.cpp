// Deterministic epoch permutations (see sample_order.h).
#include "data/sample_order.h"

#include <random>
#include <utility>

#include "util/error.h"

namespace spmd {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Unbiased draw in [0, bound): reject the 2^64 mod bound lowest values.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t x = rng();
    if (x >= threshold) return x % bound;
  }
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch) {
  SPMD_ASSERT(n >= 0 && epoch >= 0, "bad permutation request n={} epoch={}", n, epoch);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  std::mt19937_64 rng(splitmix64(splitmix64(static_cast<uint64_t>(seed)) ^
                                 static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

int64_t SampleOrder::window(int64_t epoch, int64_t position) {
  SPMD_ASSERT(position >= 0 && position < num_windows_, "position {} outside epoch of {}",
              position, num_windows_);
  if (epoch != cached_epoch_) {
    permutation_ = epoch_permutation(num_windows_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  return permutation_[position];
}

}  // namespace spmd
