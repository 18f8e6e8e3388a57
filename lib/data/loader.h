// The training data iterator (Grain-style): a shuffled epoch of non-overlapping windows whose
// order is a pure function of (seed, epoch). A blend of several sources (data.sources) takes its
// k-th sample from the source and position Grain's MapDataset.mix gives (data/blend.h), each
// source walking its own epochs in the order a run on it alone reads. The global batch of a step
// is the next global_batch rows of that order (continuing into the next epoch at an epoch end); the process with
// data-parallel index d of D reads global rows [d*B/D, (d+1)*B/D). Model-parallel peers share d and
// so read the same rows, and the iterator state is independent of the mesh: a run resumed on
// another mesh reads exactly the rows it would have.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/blend.h"
#include "data/prefetcher.h"
#include "data/sample_order.h"
#include "data/token_file.h"
#include "data/windows.h"

namespace spmd {

// A blend's weights from sample `start` (0, or the sample a resume changed them at): global sample
// k >= start is Grain's mix pick for k - start, and source i's sample number in its own order is
// offsets[i] + the pick's index.
struct BlendSegment {
  int64_t start = 0;
  std::vector<std::string> names;     // the sources, in the config's order
  std::vector<double> weights;        // the segment's weights
  std::vector<int64_t> offsets;       // samples each source gave before `start`
  bool operator==(const BlendSegment& o) const {
    return start == o.start && names == o.names && weights == o.weights && offsets == o.offsets;
  }
};

// Where a blend stands. The position moves every batch and its segment only on a resume with new
// weights: sharing the segment keeps a batch of short rows from paying for copies of it.
struct BlendPosition {
  int64_t samples = 0;                          // global samples consumed
  std::shared_ptr<const BlendSegment> segment;  // null for one source
  bool operator==(const BlendPosition& o) const {
    return samples == o.samples && (segment == o.segment || (segment && o.segment && *segment == *o.segment));
  }
};

// Where the iterator stands. Goes into every checkpoint. One source: rows consumed in the
// current epoch (`blend` empty); a blend: `blend` (epoch and position unused).
struct LoaderState {
  int64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;
  BlendPosition blend;
  bool is_blend() const { return blend.segment != nullptr; }
  bool operator==(const LoaderState& o) const {
    return seed == o.seed && epoch == o.epoch && position == o.position && blend == o.blend;
  }
  bool operator!=(const LoaderState& o) const { return !(*this == o); }
};
// {"seed": .., "epoch": .., "position": ..}, or for a blend {"seed", "samples", "segment_start",
// "sources": [{"name", "weight", "offset"}]}; a missing or mistyped field is a UsageError.
void to_json(nlohmann::json& j, const LoaderState& s);
void from_json(const nlohmann::json& j, LoaderState& s);

// This process's part of one step's batch, row-major.
struct Batch {
  int64_t rows = 0;                 // global_batch / dp_size
  int64_t seq = 0;                  // block_size
  std::vector<int64_t> inputs;      // rows * seq token ids
  std::vector<int64_t> targets;     // inputs shifted by one token
  std::vector<int64_t> window_ids;  // the window each row came from (tests, debugging)
  std::vector<int64_t> source_ids;  // a blend: the source of each row (0 for one source)
  std::vector<int64_t> source_samples;  // the row's sample number in its source's own order
  LoaderState start;                // the iterator state before this batch's step
  // Fine-tuning data: the targets (>= 0) in the whole step's global batch, every data-parallel
  // rank's rows included, the same on every rank: the loss is their sum over this count. -1 when
  // no source marks targets (every position is one).
  int64_t step_targets = -1;
};

// One source of a blend: its name, its data and its weight (any positive number).
struct BlendSource {
  std::string name;
  std::shared_ptr<const TokenDataset> data;
  double weight = 1;
};

class DataLoader {
 public:
  // Throws UsageError for bad sizes (dp_size must divide global_batch) or a file shorter than one
  // window. prefetch = queue depth of the background thread; 0 = produce in next() itself.
  // window_stride: tokens between window starts (0: block_size; see windows.h).
  DataLoader(std::shared_ptr<const TokenDataset> data, int64_t global_batch, int64_t block_size,
             int64_t seed, int64_t dp_index, int64_t dp_size, int prefetch = 2, int64_t window_stride = 0);
  // A blend (several sources, or one named source): each source's windows shuffled with `seed`.
  DataLoader(std::vector<BlendSource> sources, int64_t global_batch, int64_t block_size, int64_t seed,
             int64_t dp_index, int64_t dp_size, int prefetch = 2, int64_t window_stride = 0);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next step's rows for this process. Blocks; rethrows a background error with its type.
  Batch next();
  // The resume point: the state before the batch that next() will return.
  LoaderState state() const { return state_; }
  // Continue from `s` (its seed wins). UsageError if its position does not fit this dataset. A
  // blend's state whose weights or sources differ from this loader's starts a new segment at its
  // sample count: the new weights from there on, each source continuing from its next unread
  // sample (a source new to the blend from its first); reweight_note() then says so.
  void restore(const LoaderState& s);
  // The last restore's line about changed blend weights, "" when none changed.
  const std::string& reweight_note() const { return reweight_note_; }

  int64_t num_windows() const { return sources_[0].windows.size(); }
  const std::vector<std::string>& source_names() const { return names_; }
  int64_t local_batch() const { return global_batch_ / dp_size_; }

 private:
  struct Source {
    std::shared_ptr<const TokenDataset> data;
    WindowTable windows;
    SampleOrder order;  // producer side
    // Where the source's next sample in draw order sits, so consecutive draws need no division.
    int64_t next_sample = -1, epoch = 0, position = 0;
    int64_t window_of_sample(int64_t j);
  };
  Batch produce();
  // The targets of the blend's global batch from sample `samples` (see Batch::step_targets).
  int64_t blend_step_targets(int64_t samples);
  void start_prefetch();
  LoaderState after(const LoaderState& s, int64_t rows) const;
  // The position that continues `old` with this loader's sources and weights from its sample count.
  BlendPosition reweighted(const BlendPosition& old) const;

  std::vector<std::string> names_;     // empty for one unnamed source
  std::vector<double> weights_;
  std::vector<int64_t> proportions_;   // the current segment's (Grain's integers)
  std::unique_ptr<MixOrder> mix_;      // picks with proportions_
  std::vector<MixPick> picks_;         // producer side: the batch's picks
  std::vector<Source> sources_;
  int64_t global_batch_, dp_index_, dp_size_;
  int prefetch_;
  LoaderState state_;                  // consumer side: what next() returns next
  LoaderState cursor_;                 // producer side: the next batch to build
  std::string reweight_note_;
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
