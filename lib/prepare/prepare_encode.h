// prepare's encoding pass: every document of the corpus encoded on the workers, the tokens written
// to a TokenSink in the input's order, <|endoftext|> between documents when the vocabulary has it
// (or a tokenizer.json's start-of-text token before each).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "prepare/documents.h"
#include "data/meta.h"
#include "prepare/prepare.h"
#include "prepare/prepare_output.h"
#include "prepare/token_sink.h"

namespace spmd {

// Appends the tokens of one segment of a document (`batch` holds it: file and offset for
// messages). Each worker makes its own, so encoders may keep state (a cache).
using SegmentEncoder =
    std::function<void(const DocumentSegment&, const InputBatch&, std::vector<uint32_t>&)>;

// The token between documents: none (id < 0: documents are concatenated as they are),
// <|endoftext|> between them, or a start-of-text token before each, the first included.
struct DocumentSeparator {
  int32_t id = -1;
  bool before_first = false;
};

// Sets meta's document counts.
void encode_corpus(const PrepareOptions& options, const std::vector<std::string>& files,
                   Progress& progress, DocumentSeparator separator,
                   const std::function<SegmentEncoder()>& make_encoder, TokenSink& sink,
                   DatasetMeta& meta);

// The outputs that options ask for, their ids as wide as a vocabulary of vocab_size needs.
TokenSinkOptions sink_options(const PrepareOptions& options, int64_t vocab_size);

}  // namespace spmd
