// The encoding pass (see prepare_encode.h).
#include "prepare/prepare_encode.h"

#include "prepare/prepare_pass.h"

namespace spmd {
namespace {

struct EncodedBatch {
  std::vector<uint32_t> tokens;
  std::vector<std::pair<bool, bool>> segments;  // (starts a document, valid UTF-8) per segment
  bool leading_eot = false;                     // tokens[0] is an eot before a document
  int64_t bad_lines = 0;
};

}  // namespace

TokenSinkOptions sink_options(const PrepareOptions& options, int64_t vocab_size) {
  return {options.out_dir, options.shard_tokens, options.val_tokens, options.val_fraction,
          token_width_for_vocab(vocab_size)};
}

void encode_corpus(const PrepareOptions& options, const std::vector<std::string>& files,
                   Progress& progress, DocumentSeparator separator,
                   const std::function<SegmentEncoder()>& make_encoder, TokenSink& sink,
                   DatasetMeta& meta) {
  const DocumentOptions doc_options{options.json_key, options.skip_bad_lines};
  auto make_job = [&]() -> std::function<EncodedBatch(InputBatch&)> {
    const int32_t eot_id = separator.id;
    return [&files, doc_options, eot_id, encode = make_encoder()](InputBatch& batch) {
      BatchDocuments docs = split_documents(batch, files, doc_options);
      EncodedBatch out;
      out.bad_lines = docs.bad_lines;
      for (const DocumentSegment& segment : docs.segments) {
        out.segments.emplace_back(segment.starts_document, is_valid_utf8(segment.text));
        if (segment.starts_document && eot_id >= 0) {
          out.leading_eot = out.leading_eot || out.tokens.empty();
          out.tokens.push_back(static_cast<uint32_t>(eot_id));
        }
        encode(segment, batch, out.tokens);
      }
      return out;
    };
  };
  DocumentTally tally;
  int64_t written = 0;
  auto consume = [&](EncodedBatch& batch, PassTotals& totals) {
    // <|endoftext|> goes between documents: none before the first.
    const size_t skip = batch.leading_eot && written == 0 && !separator.before_first ? 1 : 0;
    sink.write(batch.tokens.data() + skip, batch.tokens.size() - skip);
    written += static_cast<int64_t>(batch.tokens.size() - skip);
    for (const auto& [starts, valid] : batch.segments) tally.add(starts, valid);
    meta.skipped_bad_lines += batch.bad_lines;
    totals.documents = tally.documents();
    totals.tokens = written;
  };
  run_corpus_pass<EncodedBatch>(options, files, progress, make_job, consume);
  tally.close();
  meta.documents = tally.documents();
  meta.non_utf8_documents = tally.non_utf8();
}

}  // namespace spmd
