// Opening a run's training and validation data (see training_data.h).
#include "train/training_data.h"

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {
namespace {

// Opens `path`, prefixing a UsageError with the config key it came from.
std::shared_ptr<const TokenDataset> open_as(const std::string& key, const std::string& path, int64_t vocab_size) {
  try {
    return TokenDataset::open(path, vocab_size);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", key, e.what()));
  }
}

}  // namespace

std::vector<BlendSource> open_training_sources(const Config& config) {
  const DataConfig& d = config.data;
  if (d.sources.empty()) return {BlendSource{"", TokenDataset::open(d.train, config.model.vocab_size), 1.0}};
  std::vector<BlendSource> sources;
  for (size_t i = 0; i < d.sources.size(); ++i) {
    const DataSource& s = d.sources[i];
    sources.push_back({s.name, open_as(fmt::format("data.sources[{}] ({})", i, s.name), s.path, config.model.vocab_size),
                       s.weight});
  }
  return sources;
}

std::unique_ptr<DataLoader> make_training_loader(const Config& config, int64_t dp_index, int64_t dp_size,
                                                 int prefetch) {
  return std::make_unique<DataLoader>(open_training_sources(config), config.data.batch_size, config.model.block_size,
                                      config.train.seed, dp_index, dp_size, prefetch, config.data.window_stride);
}

std::vector<std::pair<std::string, std::shared_ptr<const TokenDataset>>> open_source_val_data(const Config& config) {
  std::vector<std::pair<std::string, std::shared_ptr<const TokenDataset>>> val;
  for (size_t i = 0; i < config.data.sources.size(); ++i) {
    const DataSource& s = config.data.sources[i];
    if (!s.val.empty())
      val.emplace_back(s.name, open_as(fmt::format("data.sources[{}].val ({})", i, s.name), s.val, config.model.vocab_size));
  }
  return val;
}

}  // namespace spmd
