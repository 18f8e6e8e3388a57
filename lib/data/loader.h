// The training data iterator (Grain-style): a shuffled epoch of non-overlapping windows whose
// order is a pure function of (seed, epoch). The global batch of a step is the next global_batch
// rows of that order (continuing into the next epoch at an epoch end); the process with
// data-parallel index d of D reads global rows [d*B/D, (d+1)*B/D). Model-parallel peers share d and
// so read the same rows, and the iterator state is independent of the mesh: a run resumed on
// another mesh reads exactly the rows it would have.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/prefetcher.h"
#include "data/sample_order.h"
#include "data/token_file.h"
#include "data/windows.h"

namespace spmd {

// Where the iterator stands: rows consumed in the current epoch. Goes into every checkpoint.
struct LoaderState {
  int64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;
  bool operator==(const LoaderState& o) const {
    return seed == o.seed && epoch == o.epoch && position == o.position;
  }
  bool operator!=(const LoaderState& o) const { return !(*this == o); }
};
// {"seed": .., "epoch": .., "position": ..}; a missing or mistyped field is a UsageError.
void to_json(nlohmann::json& j, const LoaderState& s);
void from_json(const nlohmann::json& j, LoaderState& s);

// This process's part of one step's batch, row-major.
struct Batch {
  int64_t rows = 0;                 // global_batch / dp_size
  int64_t seq = 0;                  // block_size
  std::vector<int64_t> inputs;      // rows * seq token ids
  std::vector<int64_t> targets;     // inputs shifted by one token
  std::vector<int64_t> window_ids;  // the window each row came from (tests, debugging)
  LoaderState start;                // the iterator state before this batch's step
};

class DataLoader {
 public:
  // Throws UsageError for bad sizes (dp_size must divide global_batch) or a file shorter than one
  // window. prefetch = queue depth of the background thread; 0 = produce in next() itself.
  // window_stride: tokens between window starts (0: block_size; see windows.h).
  DataLoader(std::shared_ptr<const TokenDataset> data, int64_t global_batch, int64_t block_size,
             int64_t seed, int64_t dp_index, int64_t dp_size, int prefetch = 2, int64_t window_stride = 0);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next step's rows for this process. Blocks; rethrows a background error with its type.
  Batch next();
  // The resume point: the state before the batch that next() will return.
  LoaderState state() const { return state_; }
  // Continue from `s` (its seed wins). UsageError if its position does not fit this dataset.
  void restore(const LoaderState& s);

  int64_t num_windows() const { return windows_.size(); }
  int64_t local_batch() const { return global_batch_ / dp_size_; }

 private:
  Batch produce();
  void start_prefetch();

  std::shared_ptr<const TokenDataset> data_;
  WindowTable windows_;
  int64_t global_batch_, dp_index_, dp_size_;
  int prefetch_;
  LoaderState state_;                  // consumer side: what next() returns next
  LoaderState cursor_;                 // producer side: the next batch to build
  SampleOrder order_;                  // producer side
  std::unique_ptr<Prefetcher<Batch>> prefetcher_;
};

// State after consuming `rows` rows from `s` in epochs of `num_windows` windows.
LoaderState advance(const LoaderState& s, int64_t rows, int64_t num_windows);

// Evaluation: the k-th of the fixed validation batches (k >= 0). The same global rows for every
// mesh and every call (windows in the order of a fixed seed), split by data-parallel index like
// training. Costs one permutation of the validation windows per call.
Batch eval_batch(const TokenDataset& val, int64_t k, int64_t global_batch, int64_t block_size,
                 int64_t dp_index, int64_t dp_size);

}  // namespace spmd
