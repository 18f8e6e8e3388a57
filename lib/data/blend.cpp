// Grain's mix order (see blend.h).
#include "data/blend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "util/error.h"

namespace spmd {
namespace {

using Wide = __int128;  // k * (remaining weight) overflows int64 for long runs with large proportions

// Grain's recursion: among the first m samples, `m - next` go to source i and `next` to the
// sources after it, next = floor(m * (rest - p_i) / rest).
int64_t after_source(int64_t m, int64_t remaining, int64_t p) {
  if (m <= std::numeric_limits<int64_t>::max() / remaining) return m * (remaining - p) / remaining;  // the usual case
  return static_cast<int64_t>(static_cast<Wide>(m) * (remaining - p) / remaining);
}

int64_t total(const std::vector<int64_t>& proportions) {
  int64_t sum = 0;
  for (int64_t p : proportions) sum += p;
  return sum;
}

}  // namespace

std::vector<int64_t> mix_proportions(const std::vector<double>& weights) {
  SPMD_CHECK(!weights.empty(), "a blend needs at least one source");
  for (double w : weights) SPMD_CHECK(w > 0 && std::isfinite(w), "blend weight {} is not a positive number", w);
  const double smallest = *std::min_element(weights.begin(), weights.end());
  const double largest = *std::max_element(weights.begin(), weights.end());
  SPMD_CHECK(largest / smallest <= 1e9, "blend weights {} and {} are more than 1e9 apart", largest, smallest);
  const double scale = 100.0 / smallest;
  std::vector<int64_t> proportions;
  for (double w : weights) proportions.push_back(static_cast<int64_t>(w * scale));  // truncation, as Python's int()
  return proportions;
}

MixPick mix_pick(int64_t k, const std::vector<int64_t>& proportions) {
  SPMD_ASSERT(k >= 0, "mix index {} is negative", k);
  int64_t remaining = total(proportions);
  int64_t curr_k = k, curr_k1 = k + 1;
  for (size_t i = 0; i < proportions.size(); ++i) {
    const int64_t next_k = after_source(curr_k, remaining, proportions[i]);
    const int64_t next_k1 = after_source(curr_k1, remaining, proportions[i]);
    const int64_t count_k1 = curr_k1 - next_k1;
    if (curr_k - next_k != count_k1) return {static_cast<int64_t>(i), count_k1 - 1};
    remaining -= proportions[i];
    curr_k = next_k, curr_k1 = next_k1;
  }
  SPMD_ASSERT(false, "mix index {} fell through every source", k);
  return {};
}

std::vector<int64_t> mix_counts(int64_t m, const std::vector<int64_t>& proportions) {
  int64_t remaining = total(proportions);
  std::vector<int64_t> counts;
  for (int64_t p : proportions) {
    const int64_t next = after_source(m, remaining, p);
    counts.push_back(m - next);
    remaining -= p;
    m = next;
  }
  return counts;
}

MixOrder::MixOrder(std::vector<int64_t> proportions) : proportions_(std::move(proportions)) {
  constexpr int64_t kMaxTable = int64_t{1} << 20;
  period_ = total(proportions_);
  if (period_ > kMaxTable) return;
  for (int64_t k = 0; k < period_; ++k) table_.push_back(mix_pick(k, proportions_));
}

MixPick MixOrder::pick(int64_t k) const {
  if (table_.empty()) return mix_pick(k, proportions_);
  MixPick p = table_[static_cast<size_t>(k % period_)];
  p.index += (k / period_) * proportions_[static_cast<size_t>(p.source)];
  return p;
}

void MixOrder::picks(int64_t first, std::vector<MixPick>& out) const {
  const auto count = static_cast<int64_t>(out.size());
  if (table_.empty()) {
    for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = mix_pick(first + i, proportions_);
    return;
  }
  int64_t cycle = first / period_, at = first % period_;
  for (MixPick& p : out) {
    p = table_[static_cast<size_t>(at)];
    p.index += cycle * proportions_[static_cast<size_t>(p.source)];
    if (++at == period_) at = 0, ++cycle;
  }
}

}  // namespace spmd
