// Where prepare's token stream goes, in order:
// - one pair of files (nanoGPT): train.bin gets everything first, then the tail (val_tokens, or
//   val_fraction of the total) moves to val.bin; or
// - llm.c shards of shard_tokens tokens each (a 256 x int32 header, then the tokens; the header
//   says their width, GPT-2's uint16 or Llama 3's uint32, as llm.c's own shards do): the
//   first val_tokens tokens go to val_000000.bin, ... (as llm.c's fineweb.py makes its first shard
//   val), the rest to train_000000.bin, ... Each shard is written under a temporary name and
//   renamed when full, so a shard under its final name is always complete.
// Until finish() succeeds, destroying a sink removes everything it wrote.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "data/token_width.h"

namespace spmd {

struct DatasetMeta;

struct TokenSinkOptions {
  std::string out_dir;        // created if missing
  int64_t shard_tokens = 0;   // > 0: llm.c shards of this many tokens
  int64_t val_tokens = -1;    // >= 0: val's token count (shards: default one shard's worth)
  double val_fraction = 0.1;  // one pair of files without val_tokens: val's share of the tokens
  TokenWidth width = TokenWidth::kU16;  // of the ids written (token_width_for_vocab)
};

class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // Ids below 2^16 when the width is uint16 (the vocabulary chose the width).
  virtual void write(const uint32_t* tokens, size_t count) = 0;
  // Commits the outputs and sets meta's token counts, file names and dtype. UsageError when the corpus
  // is too small for the split.
  virtual void finish(DatasetMeta& meta) = 0;
};

std::unique_ptr<TokenSink> make_token_sink(const TokenSinkOptions& options);

}  // namespace spmd
