// prepare: UTF-8 text files -> train.bin / val.bin (nanoGPT's flat uint16 layout) + meta.json,
// with a char vocabulary (the sorted set of code points in the input), the 256 bytes, or GPT-2's
// byte-level BPE (learned from the input, or read from Hugging Face files; <|endoftext|> between
// input files; vocab.json + merges.txt written next to the token files).
// The first (1 - val_fraction) of the token stream is train, the rest val (as nanoGPT).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "data/meta.h"

namespace spmd {

struct PrepareOptions {
  std::vector<std::string> inputs;   // files and directories (see collect_input_files)
  std::string out_dir;
  VocabKind vocab = VocabKind::kChar;
  int64_t bpe_merges = 0;            // kBpe without tokenizer_dir: merges to learn from the input
  std::string tokenizer_dir;         // kBpe: encode with these Hugging Face files (bpe_files.h)
  double val_fraction = 0.1;         // in [0, 1)
  std::vector<std::string> exclude;  // globs of inputs to skip
  std::function<void(const std::string&)> progress;  // one line per 16 MB read; null = silent
};

// Writes out_dir/{train.bin,val.bin,meta.json} (each under a temporary name first, meta.json
// last, so a complete meta.json means complete outputs) and returns the meta written.
// UsageError: missing or empty input, invalid UTF-8 for a char vocabulary (file and byte offset),
// more characters or BPE ids than uint16 holds, broken tokenizer files. RuntimeError: a write failed.
DatasetMeta prepare(const PrepareOptions& options);

}  // namespace spmd
