// spmd-prepare --format prompt-completion|chat: JSON Lines of fine-tuning rows (plain, gzip or
// zstd) -> windows of packed examples in train.bin / val.bin, their targets in
// train.targets.bin / val.targets.bin (one byte per token, 1 = target), the tokenizer files and
// meta.json (its "fine_tuning" entry: the block size the windows were packed for, the id that
// ends an example, the counts). Each token file holds whole windows and one padding token after
// the last (a window reads block_size + 1 tokens). The last windows (val_fraction of them, at
// least one when val_fraction > 0) are val. Everything is written under temporary names and
// renamed at the end, meta.json last: an error leaves nothing half-written.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "chat/sft_examples.h"
#include "data/meta.h"

namespace spmd {

struct SftPrepareOptions {
  std::vector<std::string> inputs;  // JSON Lines files, directories, globs
  std::string out_dir;
  std::string tokenizer_dir;        // a Hugging Face tokenizer folder (tokenizer.json preferred)
  SftFormat format = SftFormat::kChat;
  std::optional<TrainOn> train_on;  // default: assistant for chats, completion for prompt/completion
  int64_t block_size = 0;
  bool pack = true;
  double val_fraction = 0.1;
  std::function<void(const std::string&)> progress;  // null = silent
};

// UsageError (file:line where a row is at fault) for every input problem; RuntimeError when a
// write fails.
DatasetMeta prepare_sft(const SftPrepareOptions& options);

// The tokenizer of a folder as fine-tuning reads it: tokenizer.json when there is one (it holds the
// chat template's added tokens), else vocab.json + merges.txt.
BpeTokenizer read_fine_tuning_tokenizer(const std::string& dir);

}  // namespace spmd
