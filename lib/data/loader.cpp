// The sharded, deterministic, prefetching training iterator and the fixed eval batches
// (see loader.h).
#include "data/loader.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/blend.h"

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

std::vector<BlendSource> checked_sources(std::vector<BlendSource> sources) {
  SPMD_ASSERT(!sources.empty(), "DataLoader needs a dataset");
  for (const auto& s : sources) SPMD_ASSERT(s.data != nullptr, "DataLoader needs a dataset");
  return sources;
}

// Copies window `w` of `windows` as row r of `b`.
void copy_row(const WindowTable& windows, int64_t w, int64_t r, Batch& b) {
  windows.copy(w, b.inputs.data() + r * b.seq, b.targets.data() + r * b.seq);
  b.window_ids[r] = w;
}

Batch empty_batch(int64_t rows, int64_t seq, const LoaderState& start) {
  Batch b;
  b.rows = rows;
  b.seq = seq;
  b.start = start;
  b.inputs.resize(static_cast<size_t>(rows * seq));
  b.targets.resize(static_cast<size_t>(rows * seq));
  b.window_ids.resize(static_cast<size_t>(rows));
  b.source_ids.assign(static_cast<size_t>(rows), 0);
  b.source_samples.resize(static_cast<size_t>(rows));
  return b;
}

// The targets of every global row of the step that starts at `start` (fine-tuning data only).
int64_t step_targets_of(const WindowTable& windows, SampleOrder& order, const LoaderState& start, int64_t global_batch) {
  if (!windows.marks_targets()) return -1;
  int64_t n = 0;
  for (int64_t r = 0; r < global_batch; ++r) {
    const LoaderState at = advance(start, r, windows.size());
    n += windows.count_targets(order.window(at.epoch, at.position));
  }
  return n;
}

// This process's rows of the step that starts at `start`: global rows [d*B/D, (d+1)*B/D).
Batch make_batch(const WindowTable& windows, SampleOrder& order, const LoaderState& start,
                 int64_t global_batch, int64_t dp_index, int64_t dp_size) {
  const int64_t n = windows.size();
  const int64_t rows = global_batch / dp_size;
  Batch b = empty_batch(rows, windows.block_size(), start);
  LoaderState at = advance(start, dp_index * rows, n);
  for (int64_t r = 0; r < rows; ++r) {
    copy_row(windows, order.window(at.epoch, at.position), r, b);
    b.source_samples[r] = at.epoch * n + at.position;
    if (++at.position == n) {  // the step straddles an epoch end: go on into the next epoch
      at.position = 0;
      ++at.epoch;
    }
  }
  b.step_targets = step_targets_of(windows, order, start, global_batch);
  return b;
}

std::string describe_weights(const std::vector<std::string>& names, const std::vector<double>& weights) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += fmt::format("{}{} {}", i ? ", " : "", names[i], weights[i]);
  return text;
}

}  // namespace

void to_json(nlohmann::json& j, const LoaderState& s) {
  if (!s.is_blend()) {
    j = nlohmann::json{{"seed", s.seed}, {"epoch", s.epoch}, {"position", s.position}};
    return;
  }
  nlohmann::json sources = nlohmann::json::array();
  const BlendSegment& segment = *s.blend.segment;
  for (size_t i = 0; i < segment.names.size(); ++i)
    sources.push_back({{"name", segment.names[i]}, {"weight", segment.weights[i]}, {"offset", segment.offsets[i]}});
  j = nlohmann::json{{"seed", s.seed}, {"samples", s.blend.samples}, {"segment_start", segment.start},
                     {"sources", sources}};
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  auto field = [](const nlohmann::json& o, const char* name, bool (nlohmann::json::*is)() const) -> const nlohmann::json& {
    SPMD_CHECK(o.is_object() && o.contains(name) && (o.at(name).*is)(),
               "data loader state: missing or mistyped field '{}' in {}", name, o.dump());
    return o.at(name);
  };
  auto integer = [&](const nlohmann::json& o, const char* name) {
    return field(o, name, &nlohmann::json::is_number_integer).get<int64_t>();
  };
  s = LoaderState{};
  s.seed = integer(j, "seed");
  if (!j.is_object() || !j.contains("sources")) {
    s.epoch = integer(j, "epoch");
    s.position = integer(j, "position");
    return;
  }
  s.blend.samples = integer(j, "samples");
  BlendSegment segment;
  segment.start = integer(j, "segment_start");
  for (const auto& source : field(j, "sources", &nlohmann::json::is_array)) {
    segment.names.push_back(field(source, "name", &nlohmann::json::is_string).get<std::string>());
    segment.weights.push_back(field(source, "weight", &nlohmann::json::is_number).get<double>());
    segment.offsets.push_back(integer(source, "offset"));
  }
  SPMD_CHECK(!segment.names.empty() && s.blend.samples >= segment.start && segment.start >= 0,
             "data loader state: a blend's position needs sources and 0 <= segment_start <= samples: {}", j.dump());
  s.blend.segment = std::make_shared<const BlendSegment>(std::move(segment));
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
    : DataLoader(std::vector<BlendSource>{{"", std::move(data), 1.0}}, global_batch, block_size, seed, dp_index,
                 dp_size, prefetch, window_stride) {}

DataLoader::DataLoader(std::vector<BlendSource> sources, int64_t global_batch, int64_t block_size, int64_t seed,
                       int64_t dp_index, int64_t dp_size, int prefetch, int64_t window_stride)
    : global_batch_(global_batch), dp_index_(dp_index), dp_size_(dp_size), prefetch_(prefetch) {
  sources = checked_sources(std::move(sources));
  const bool blend = sources.size() > 1 || !sources[0].name.empty();
  for (auto& source : sources) {
    WindowTable windows(*source.data, block_size, window_stride);
    const int64_t n = windows.size();
    sources_.push_back(Source{source.data, std::move(windows), SampleOrder(n, seed)});
    if (blend) names_.push_back(source.name), weights_.push_back(source.weight);
  }
  if (blend) proportions_ = mix_proportions(weights_), mix_ = std::make_unique<MixOrder>(proportions_);
  check_split(global_batch, dp_index, dp_size);
  SPMD_CHECK(prefetch >= 0 && prefetch <= 64, "data: prefetch depth {} not in [0, 64]", prefetch);
  state_.seed = seed;
  if (blend)
    state_.blend = BlendPosition{
        0, std::make_shared<const BlendSegment>(BlendSegment{0, names_, weights_, std::vector<int64_t>(names_.size(), 0)})};
  cursor_ = state_;
  start_prefetch();
}

DataLoader::~DataLoader() = default;  // prefetcher_ (last member) stops its thread first

void DataLoader::start_prefetch() {
  if (prefetch_ > 0)
    prefetcher_ = std::make_unique<Prefetcher<Batch>>([this] { return produce(); },
                                                      static_cast<size_t>(prefetch_));
}

LoaderState DataLoader::after(const LoaderState& s, int64_t rows) const {
  if (!s.is_blend()) return advance(s, rows, sources_[0].windows.size());
  LoaderState out = s;
  out.blend.samples += rows;
  return out;
}

int64_t DataLoader::Source::window_of_sample(int64_t j) {
  const int64_t n = windows.size();
  if (j != next_sample) epoch = j / n, position = j % n;
  const int64_t w = order.window(epoch, position);
  next_sample = j + 1;
  if (++position == n) position = 0, ++epoch;
  return w;
}

Batch DataLoader::produce() {
  if (!cursor_.is_blend()) {
    Source& only = sources_[0];
    Batch b = make_batch(only.windows, only.order, cursor_, global_batch_, dp_index_, dp_size_);
    cursor_ = after(cursor_, global_batch_);
    return b;
  }
  const BlendPosition& at = cursor_.blend;
  const BlendSegment& segment = *at.segment;
  const int64_t rows = global_batch_ / dp_size_;
  Batch b = empty_batch(rows, sources_[0].windows.block_size(), cursor_);
  picks_.resize(static_cast<size_t>(rows));
  mix_->picks(at.samples + dp_index_ * rows - segment.start, picks_);
  for (int64_t r = 0; r < rows; ++r) {
    const MixPick& pick = picks_[static_cast<size_t>(r)];
    Source& source = sources_[static_cast<size_t>(pick.source)];
    const int64_t j = segment.offsets[static_cast<size_t>(pick.source)] + pick.index;  // its own order's sample
    copy_row(source.windows, source.window_of_sample(j), r, b);
    b.source_ids[r] = pick.source;
    b.source_samples[r] = j;
  }
  b.step_targets = blend_step_targets(at.samples);
  cursor_ = after(cursor_, global_batch_);
  return b;
}

int64_t DataLoader::blend_step_targets(int64_t samples) {
  bool marked = false;
  for (const Source& source : sources_) marked = marked || source.windows.marks_targets();
  if (!marked) return -1;
  const BlendSegment& segment = *cursor_.blend.segment;
  std::vector<MixPick> picks(static_cast<size_t>(global_batch_));
  mix_->picks(samples - segment.start, picks);
  int64_t n = 0;
  for (const MixPick& pick : picks) {
    Source& source = sources_[static_cast<size_t>(pick.source)];
    n += source.windows.count_targets(source.window_of_sample(segment.offsets[static_cast<size_t>(pick.source)] + pick.index));
  }
  return n;
}

Batch DataLoader::next() {
  Batch b = prefetcher_ ? prefetcher_->next() : produce();
  state_ = after(b.start, global_batch_);
  return b;
}

void DataLoader::restore(const LoaderState& s) {
  SPMD_CHECK(s.is_blend() == !names_.empty(),
             "loader state: the checkpoint's data position is {} but the config has {}; resume with the data it was "
             "saved with", s.is_blend() ? "a blend's (data.sources)" : "one source's (data.train)",
             names_.empty() ? "data.train" : "data.sources");
  LoaderState next = s;
  reweight_note_.clear();
  if (!s.is_blend()) {
    const WindowTable& windows = sources_[0].windows;
    SPMD_CHECK(s.epoch >= 0 && s.position >= 0 && s.position < windows.size(),
               "{}: loader state (epoch {}, position {}) does not fit this dataset's {} windows of "
               "{} tokens: did the data, block_size or window_stride change since the checkpoint?",
               sources_[0].data->spec(), s.epoch, s.position, windows.size(), windows.block_size() + 1);
  } else if (s.blend.segment->names != names_ || mix_proportions(s.blend.segment->weights) != proportions_) {
    next.blend = reweighted(s.blend);
    reweight_note_ = fmt::format("data blend: weights changed from [{}] to [{}]: from step {} (sample {}) Grain's mix "
                                 "restarts with the new weights, each source continuing from its next unread sample",
                                 describe_weights(s.blend.segment->names, s.blend.segment->weights),
                                 describe_weights(names_, weights_),
                                 s.blend.samples / global_batch_ + 1, s.blend.samples);
  }
  prefetcher_.reset();  // joins the thread before the producer's state changes under it
  state_ = next;
  cursor_ = next;
  for (Source& source : sources_) source.order = SampleOrder(source.windows.size(), s.seed);
  start_prefetch();
}

BlendPosition DataLoader::reweighted(const BlendPosition& old) const {
  const BlendSegment& was = *old.segment;
  SPMD_CHECK(was.names.size() == was.weights.size() && was.names.size() == was.offsets.size(),
             "loader state: a blend's names, weights and offsets differ in number");
  const std::vector<int64_t> drawn = mix_counts(old.samples - was.start, mix_proportions(was.weights));
  BlendSegment now{old.samples, names_, weights_, std::vector<int64_t>(names_.size(), 0)};
  for (size_t i = 0; i < names_.size(); ++i)
    for (size_t o = 0; o < was.names.size(); ++o)
      if (was.names[o] == names_[i]) now.offsets[i] = was.offsets[o] + drawn[o];
  return BlendPosition{old.samples, std::make_shared<const BlendSegment>(std::move(now))};
}

Batch eval_batch(const TokenDataset& val, int64_t k, int64_t global_batch, int64_t block_size,
                 int64_t dp_index, int64_t dp_size) {
  check_split(global_batch, dp_index, dp_size);
  SPMD_CHECK(k >= 0, "data: eval batch index must be >= 0, got {}", k);
  WindowTable windows(val, block_size);
  SampleOrder order(windows.size(), kEvalSeed);
  LoaderState first;
  first.seed = kEvalSeed;
  const LoaderState start = advance(first, k * global_batch, windows.size());
  return make_batch(windows, order, start, global_batch, dp_index, dp_size);
}

}  // namespace spmd
