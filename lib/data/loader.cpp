// The sharded, deterministic, prefetching training iterator and the fixed eval batches
// (see loader.h).
#include "data/loader.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace spmd {
namespace {

// Evaluation windows are drawn in the order of this seed, whatever the training seed.
constexpr int64_t kEvalSeed = 0x5eedeba1;

void check_split(int64_t global_batch, int64_t dp_index, int64_t dp_size) {
  SPMD_CHECK(global_batch >= 1, "data: batch size must be positive, got {}", global_batch);
  SPMD_CHECK(dp_size >= 1 && dp_index >= 0 && dp_index < dp_size,
             "data: data-parallel index {} is not in [0, {})", dp_index, dp_size);
  SPMD_CHECK(global_batch % dp_size == 0,
             "data: batch size {} does not divide evenly over {} data-parallel ranks",
             global_batch, dp_size);
}

const TokenDataset& non_null(const std::shared_ptr<const TokenDataset>& data) {
  SPMD_ASSERT(data != nullptr, "DataLoader needs a dataset");
  return *data;
}

// This process's rows of the step that starts at `start`: global rows [d*B/D, (d+1)*B/D).
Batch make_batch(const WindowTable& windows, SampleOrder& order, const LoaderState& start,
                 int64_t global_batch, int64_t dp_index, int64_t dp_size) {
  const int64_t n = windows.size();
  const int64_t T = windows.block_size();
  const int64_t rows = global_batch / dp_size;
  Batch b;
  b.rows = rows;
  b.seq = T;
  b.start = start;
  b.inputs.resize(static_cast<size_t>(rows * T));
  b.targets.resize(static_cast<size_t>(rows * T));
  b.window_ids.resize(static_cast<size_t>(rows));
  LoaderState at = advance(start, dp_index * rows, n);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t w = order.window(at.epoch, at.position);
    windows.copy(w, b.inputs.data() + r * T, b.targets.data() + r * T);
    b.window_ids[r] = w;
    if (++at.position == n) {  // the step straddles an epoch end: go on into the next epoch
      at.position = 0;
      ++at.epoch;
    }
  }
  return b;
}

}  // namespace

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"seed", s.seed}, {"epoch", s.epoch}, {"position", s.position}};
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  auto field = [&](const char* name) -> int64_t {
    SPMD_CHECK(j.is_object() && j.contains(name) && j.at(name).is_number_integer(),
               "data loader state: missing or non-integer field '{}' in {}", name, j.dump());
    return j.at(name).get<int64_t>();
  };
  s.seed = field("seed");
  s.epoch = field("epoch");
  s.position = field("position");
}

LoaderState advance(const LoaderState& s, int64_t rows, int64_t num_windows) {
  LoaderState out = s;
  int64_t total = s.position + rows;
  out.epoch += total / num_windows;
  out.position = total % num_windows;
  return out;
}

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> data, int64_t global_batch,
                       int64_t block_size, int64_t seed, int64_t dp_index, int64_t dp_size,
                       int prefetch, int64_t window_stride)
    : data_(std::move(data)),
      windows_(non_null(data_), block_size, window_stride),
      global_batch_(global_batch),
      dp_index_(dp_index),
      dp_size_(dp_size),
      prefetch_(prefetch),
      state_{seed, 0, 0},
      cursor_{seed, 0, 0},
      order_(windows_.size(), seed) {
  check_split(global_batch, dp_index, dp_size);
  SPMD_CHECK(prefetch >= 0 && prefetch <= 64, "data: prefetch depth {} not in [0, 64]", prefetch);
  start_prefetch();
}

DataLoader::~DataLoader() = default;  // prefetcher_ (last member) stops its thread first

void DataLoader::start_prefetch() {
  if (prefetch_ > 0)
    prefetcher_ = std::make_unique<Prefetcher<Batch>>([this] { return produce(); },
                                                      static_cast<size_t>(prefetch_));
}

Batch DataLoader::produce() {
  Batch b = make_batch(windows_, order_, cursor_, global_batch_, dp_index_, dp_size_);
  cursor_ = advance(cursor_, global_batch_, windows_.size());
  return b;
}

Batch DataLoader::next() {
  Batch b = prefetcher_ ? prefetcher_->next() : produce();
  state_ = advance(b.start, global_batch_, windows_.size());
  return b;
}

void DataLoader::restore(const LoaderState& s) {
  SPMD_CHECK(s.epoch >= 0 && s.position >= 0 && s.position < windows_.size(),
             "{}: loader state (epoch {}, position {}) does not fit this dataset's {} windows of "
             "{} tokens: did the data, block_size or window_stride change since the checkpoint?",
             data_->spec(), s.epoch, s.position, windows_.size(), windows_.block_size() + 1);
  prefetcher_.reset();  // joins the thread before the producer's state changes under it
  state_ = s;
  cursor_ = s;
  order_ = SampleOrder(windows_.size(), s.seed);
  start_prefetch();
}

Batch eval_batch(const TokenDataset& val, int64_t k, int64_t global_batch, int64_t block_size,
                 int64_t dp_index, int64_t dp_size) {
  check_split(global_batch, dp_index, dp_size);
  SPMD_CHECK(k >= 0, "data: eval batch index must be >= 0, got {}", k);
  WindowTable windows(val, block_size);
  SampleOrder order(windows.size(), kEvalSeed);
  LoaderState start = advance(LoaderState{kEvalSeed, 0, 0}, k * global_batch, windows.size());
  return make_batch(windows, order, start, global_batch, dp_index, dp_size);
}

}  // namespace spmd
