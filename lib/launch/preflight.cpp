// The pre-launch checks: each input opened and validated the way the run will use it.
#include "launch/preflight.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

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
    const int64_t file_most =
        f.visit([&](const auto* t) { return static_cast<int64_t>(*std::max_element(t, t + f.num_tokens())); });
    most = std::max(most, file_most);
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
  auto data = with_key(key, [&] { return TokenDataset::open(spec, kAnyTokenId); });
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
  const std::string meta = dataset_meta_path(tokenizer_data_path(config.data));
  SPMD_CHECK(!meta.empty() || config.train.sample_every == 0,
             "train.sample_every = {} needs the tokenizer of data.train ({}), but there is no meta.json beside it; "
             "prepare the data with spmd-prepare, or set train.sample_every: 0",
             config.train.sample_every, config.data.train);
  if (!meta.empty()) with_key("data.train", [&] { return read_meta(meta); });
}
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPMD_CHECK(in.good(), "cannot read {}", path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// What makes two prepared datasets' token ids mean the same: the vocabulary and, for BPE, the
// bytes of its files.
std::string tokenizer_identity(const std::string& meta_path) {
  const DatasetMeta meta = read_meta(meta_path);
  std::string identity = fmt::format("{} {} {} ", static_cast<int>(meta.vocab), meta.vocab_size, meta.eot_token);
  for (char32_t c : meta.chars) identity += fmt::format("{},", static_cast<uint32_t>(c));
  const auto dir = std::filesystem::path(meta_path).parent_path();
  for (const std::string& file : tokenizer_files(meta))
    if (file != "meta.json") identity += file_bytes((dir / file).string());
  return identity;
}

// A blend's sources: each opened as the run will, and all prepared with one tokenizer (each has
// meta.json, or none has).
void check_blend_sources(const Config& config) {
  const auto& sources = config.data.sources;
  std::string first_identity;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string key = fmt::format("data.sources[{}] ({})", i, sources[i].name);
    check_token_data(key, sources[i].path, config);
    if (config.train.eval_every > 0 && !sources[i].val.empty()) check_token_data(key + ".val", sources[i].val, config);
    const std::string meta = dataset_meta_path(sources[i].path);
    const std::string first_meta = dataset_meta_path(sources[0].path);
    SPMD_CHECK(meta.empty() == first_meta.empty(),
               "{}: {} has {} meta.json beside it but data.sources[0] ({}) has {}: a blend's sources must all be "
               "prepared datasets with the same tokenizer", key, sources[i].path, meta.empty() ? "no" : "a",
               sources[0].name, first_meta.empty() ? "none" : "one");
    if (meta.empty()) continue;
    const std::string identity = with_key(key, [&] { return tokenizer_identity(meta); });
    if (i == 0) first_identity = identity;
    SPMD_CHECK(identity == first_identity,
               "{}: its tokenizer ({}) differs from data.sources[0] ({})'s ({}): a blend's sources must be prepared "
               "with the same tokenizer", key, meta, sources[0].name, first_meta);
  }
}
}  // namespace

void preflight_check(const Config& config, const TrainOptions& options) {
  if (config.data.sources.empty()) {
    check_token_data("data.train", config.data.train, config);
  } else {
    check_blend_sources(config);
  }
  check_tokenizer(config);
  document_eot_token(config);  // data.document_mask: an end-of-text id to cut documents at
  if (config.train.eval_every > 0 && (config.data.sources.empty() || !config.data.val.empty()))
    check_token_data("data.val", config.data.val, config);
  const bool resuming = options.resume && !resolve_resume_path(config, options.resume_path).empty();
  if (!resuming) check_hf_checkpoint(config);  // train.init_from against model.* (a checkpoint wins)
  load_training_tasks(config);  // eval.tasks: each file read and encoded as the run will
  check_output_dirs(config);
}

}  // namespace spmd
