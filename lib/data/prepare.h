// prepare: UTF-8 text files -> train.bin / val.bin (nanoGPT's flat uint16 layout) + meta.json,
// with a char vocabulary (the sorted set of code points in the input) or the 256 bytes.
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
  double val_fraction = 0.1;         // in [0, 1)
  std::vector<std::string> exclude;  // globs of inputs to skip
  std::function<void(const std::string&)> progress;  // one line per 16 MB read; null = silent
};

// Writes out_dir/{train.bin,val.bin,meta.json} (each under a temporary name first, meta.json
// last, so a complete meta.json means complete outputs) and returns the meta written.
// UsageError: missing or empty input, invalid UTF-8 for a char vocabulary (file and byte offset),
// more characters than uint16 holds. RuntimeError: a write failed.
DatasetMeta prepare(const PrepareOptions& options);

}  // namespace spmd
