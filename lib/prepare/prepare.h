// prepare: a corpus (text files and JSON Lines, plain, gzip or zstd) -> token files (nanoGPT's
// train.bin / val.bin, or llm.c shards) + meta.json, with a char vocabulary (the sorted set of
// code points in the input), the 256 bytes, or GPT-2's byte-level BPE (learned from the input,
// or read from Hugging Face files; <|endoftext|> between documents; vocab.json + merges.txt
// written next to the token files). A text file is one document, a JSON line is one.
// Documents are encoded on `workers` threads; the output is the same bytes for any worker count.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "data/meta.h"

namespace spmd {

struct PrepareOptions {
  std::vector<std::string> inputs;   // files, directories and globs (see collect_input_files)
  std::string out_dir;
  VocabKind vocab = VocabKind::kChar;
  int64_t bpe_merges = 0;            // kBpe without tokenizer_dir: merges to learn from the input
  std::string tokenizer_dir;         // kBpe: encode with these Hugging Face files (bpe_files.h)
  double val_fraction = 0.1;         // in [0, 1); one pair of files without val_tokens
  int64_t val_tokens = -1;           // >= 0: val's token count (see token_sink.h)
  int64_t shard_tokens = 0;          // > 0: llm.c shards of this many tokens
  std::vector<std::string> exclude;  // globs of inputs to skip
  std::string json_key = "text";     // JSON Lines: the document's field
  bool skip_bad_lines = false;       // JSON Lines: count and skip malformed lines
  int workers = 0;                   // encoding threads; <= 0: the cores this process may use
  std::function<void(const std::string&)> progress;  // progress lines; null = silent
  std::function<bool()> cancelled;   // polled after each batch; true stops with a RuntimeError
};

// Writes the token files and out_dir/meta.json (each under a temporary name first, meta.json
// last, so a complete meta.json means complete outputs) and returns the meta written.
// UsageError: missing or empty input, a malformed JSON line (file:line), invalid UTF-8 for a char
// vocabulary (file and byte offset), corrupt compressed data, bpe:N past int32 ids, broken
// tokenizer files. RuntimeError: a write failed, or cancelled.
// Token ids are uint16 when the vocabulary has at most 65536 ids, uint32 past that (meta.json's
// "dtype"; an llm.c shard's header).
DatasetMeta prepare(const PrepareOptions& options);

// The cores this process may run on (its CPU affinity).
int available_cores();

}  // namespace spmd
