// prepare with a byte-level BPE (see prepare.h): learn the merges (bpe:N) or read Hugging Face
// files, encode every input file (<|endoftext|> between files) and write train.bin / val.bin,
// vocab.json + merges.txt and meta.json.
#pragma once
#include <string>
#include <vector>

#include "data/meta.h"
#include "prepare/prepare.h"

namespace spmd {

// `files`: the collected inputs, `total_bytes` their size (> 0).
DatasetMeta prepare_bpe(const PrepareOptions& options, const std::vector<std::string>& files,
                        size_t total_bytes);

}  // namespace spmd
