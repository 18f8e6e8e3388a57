// A weighted blend's order: Grain's MapDataset.mix (grain/_src/python/dataset/transformations/mix.py)
// as integer arithmetic with no state. The weights become integer proportions (scaled so the
// smallest is 100, then truncated); global sample k comes from the source, and is that source's
// sample number, that Grain's _dataset_and_key_of_next_element gives for k.
#pragma once
#include <cstdint>
#include <vector>

namespace spmd {

// int(w * (100 / min(weights))) for each weight, as Grain's _float_to_int_proportions. UsageError
// unless every weight is positive and finite and the largest at most 1e9 times the smallest.
std::vector<int64_t> mix_proportions(const std::vector<double>& weights);

struct MixPick {
  int64_t source = 0;  // which source
  int64_t index = 0;   // how many samples that source gave before this one
};

// The source and index of global sample k (k >= 0) of a mix with these proportions.
MixPick mix_pick(int64_t k, const std::vector<int64_t>& proportions);

// How many of the first m samples each source gives (sums to m).
std::vector<int64_t> mix_counts(int64_t m, const std::vector<int64_t>& proportions);

// mix_pick at the cost of a table lookup. The mix is periodic: after P = sum(proportions) samples
// every source has given exactly its proportion, so pick(k + P) = pick(k) with the index moved on
// by that proportion. One period is tabulated when P is small (it is 100 x the weights' ratios
// summed: a few hundred to thousands for usual blends); otherwise each pick is computed.
class MixOrder {
 public:
  explicit MixOrder(std::vector<int64_t> proportions);
  MixPick pick(int64_t k) const;
  // out[i] = pick(first + i) for every i < out.size(): the consecutive picks of a batch's rows,
  // stepping through the table instead of dividing for each (into the caller's buffer: a batch of
  // short rows costs about a microsecond, an allocation a noticeable part of it).
  void picks(int64_t first, std::vector<MixPick>& out) const;

 private:
  std::vector<int64_t> proportions_;
  int64_t period_ = 0;
  std::vector<MixPick> table_;  // picks 0..period-1; empty when the period is too long
};

}  // namespace spmd
