// The pre-launch checks: each input opened and validated the way the run will use it.
#include "launch/preflight.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "ckpt/checkpoint_restore.h"
#include "eval/training_tasks.h"
#include "hf/hf_import.h"
#include "data/dataset_tokenizer.h"
#include "data/meta.h"
#include "data/token_file.h"
#include "data/windows.h"
#include "launch/output_dirs.h"
#include "train/documents.h"
#include "util/error.h"

namespace spmd {

namespace {
// Runs `check`, prefixing a UsageError with the config key that named the input.
template <typename F>
auto with_key(const std::string& key, F&& check) {
  try {
    return check();
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", key, e.what()));
  }
}

int64_t max_token(const TokenDataset& data) {
  int64_t most = 0;
  for (const auto& f : data.files()) {
    const uint16_t* t = f.tokens();
    if (f.num_tokens() > 0) most = std::max<int64_t>(most, *std::max_element(t, t + f.num_tokens()));
  }
  return most;
}

// spmd-prepare writes meta.json beside train.bin/val.bin: the vocabulary the ids came from.
std::string meta_note(const std::string& spec) {
  const auto meta = std::filesystem::path(spec).parent_path() / "meta.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(meta, ec)) return "";
  return fmt::format("; {} says vocab_size {}", meta.string(), read_meta(meta.string()).vocab_size);
}

// Opens a token dataset as the run will (every id checked) and checks it against the model.
void check_token_data(const std::string& key, const std::string& spec, const Config& config) {
  const auto& m = config.model;
  auto data = with_key(key, [&] { return TokenDataset::open(spec, int64_t{1} << 17); });  // any uint16 id
  const int64_t most = max_token(*data);
  SPMD_CHECK(most < m.vocab_size,
             "{}: {} holds token ids up to {} but model.vocab_size = {}; set model.vocab_size to at least {}{}", key,
             spec, most, m.vocab_size, most + 1, meta_note(spec));
  with_key(key, [&] {
    try {
      WindowTable windows(*data, m.block_size, config.data.window_stride);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}; lower model.block_size = {} or use a longer file", e.what(), m.block_size));
    }
  });
}

// The tokenizer spmd-prepare left beside the training data (BPE: vocab.json and merges.txt too):
// it is copied into checkpoints and decodes train.sample_every's samples, so it must load.
void check_tokenizer(const Config& config) {
  const std::string meta = dataset_meta_path(config.data.train);
  SPMD_CHECK(!meta.empty() || config.train.sample_every == 0,
             "train.sample_every = {} needs the tokenizer of data.train ({}), but there is no meta.json beside it; "
             "prepare the data with spmd-prepare, or set train.sample_every: 0",
             config.train.sample_every, config.data.train);
  if (!meta.empty()) with_key("data.train", [&] { return read_meta(meta); });
}
}  // namespace

void preflight_check(const Config& config, const TrainOptions& options) {
  check_token_data("data.train", config.data.train, config);
  check_tokenizer(config);
  document_eot_token(config);  // data.document_mask: an end-of-text id to cut documents at
  if (config.train.eval_every > 0) check_token_data("data.val", config.data.val, config);
  const bool resuming = options.resume && !resolve_resume_path(config, options.resume_path).empty();
  if (!resuming) check_hf_checkpoint(config);  // train.init_from against model.* (a checkpoint wins)
  load_training_tasks(config);  // eval.tasks: each file read and encoded as the run will
  check_output_dirs(config);
}

}  // namespace spmd
