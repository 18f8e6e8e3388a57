// The order in which an epoch visits the windows: a permutation that is a pure function of
// (seed, epoch, number of windows), identical on every platform and standard library (mt19937_64's
// output is fixed by the standard; the shuffle and the bounded draw are written out here because
// std::shuffle and std::uniform_int_distribution are implementation-defined).
#pragma once
#include <cstdint>
#include <vector>

namespace spmd {

// Fisher-Yates over [0, n) with std::mt19937_64 seeded from a hash of (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch);

// Window at `position` of `epoch`, caching the last epoch's permutation: batches walk forward, so
// one cached epoch is enough even when a batch straddles an epoch end.
class SampleOrder {
 public:
  SampleOrder(int64_t num_windows, int64_t seed) : num_windows_(num_windows), seed_(seed) {}
  int64_t window(int64_t epoch, int64_t position);
  int64_t num_windows() const { return num_windows_; }
  int64_t seed() const { return seed_; }

 private:
  int64_t num_windows_;
  int64_t seed_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
};

}  // namespace spmd
