// The data a run trains and evaluates on, opened from the config: data.train or the blend of
// data.sources (one loader either way), data.val, and each source's own validation set.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "data/loader.h"
#include "data/token_file.h"

namespace spmd {

// data.train as one source, or data.sources as a blend (UsageError naming a source that fails).
std::vector<BlendSource> open_training_sources(const Config& config);

// The training iterator of data-parallel rank dp_index of dp_size.
std::unique_ptr<DataLoader> make_training_loader(const Config& config, int64_t dp_index, int64_t dp_size,
                                                 int prefetch = 2);

// Each source's own validation data (data.sources[i].val), by name: val_loss/<name>.
std::vector<std::pair<std::string, std::shared_ptr<const TokenDataset>>> open_source_val_data(const Config& config);

}  // namespace spmd
