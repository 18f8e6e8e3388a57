// The BPE prepare pipeline (see prepare_bpe.h): learn the merges from the documents (bpe:N; one
// pass, its counting in input order) or read Hugging Face files, then encode on the workers.
#include "prepare/prepare_bpe.h"

#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <memory>

#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_train.h"
#include "prepare/prepare_encode.h"
#include "prepare/prepare_pass.h"
#include "util/error.h"

namespace spmd {
namespace {

std::shared_ptr<const BpeTokenizer> learn_or_read(const PrepareOptions& options,
                                                  const std::vector<std::string>& files,
                                                  Progress& progress) {
  if (!options.tokenizer_dir.empty())
    return std::make_shared<const BpeTokenizer>(read_tokenizer_dir(options.tokenizer_dir));
  constexpr int64_t kMaxMerges = std::numeric_limits<int32_t>::max() - 257;  // ids are int32
  SPMD_CHECK(options.bpe_merges >= 0 && options.bpe_merges <= kMaxMerges,
             "--vocab bpe:{}: N must be in [0, {}] so that the 256 bytes, N merges and "
             "<|endoftext|> have int32 ids",
             options.bpe_merges, kMaxMerges);
  BpeTrainer trainer;
  const DocumentOptions doc_options{options.json_key, options.skip_bad_lines};
  auto make_job = [&]() -> std::function<BatchDocuments(InputBatch&)> {
    return [&files, doc_options](InputBatch& batch) {
      return split_documents(batch, files, doc_options);
    };
  };
  auto consume = [&](BatchDocuments& docs, PassTotals& totals) {
    for (const auto& segment : docs.segments) {
      trainer.add_text(segment.text);
      totals.documents += segment.starts_document ? 1 : 0;
    }
  };
  run_corpus_pass<BatchDocuments>(options, files, progress, make_job, consume);
  return std::make_shared<const BpeTokenizer>(trainer.train(options.bpe_merges, options.progress));
}

// Each worker encodes with its own BpeEncoder (a pre-tokenizer and a word cache).
std::function<SegmentEncoder()> bpe_encoder(std::shared_ptr<const BpeTokenizer> tokenizer) {
  return [tokenizer]() -> SegmentEncoder {
    auto encoder = std::make_shared<BpeEncoder>(*tokenizer);
    auto ids = std::make_shared<std::vector<int32_t>>();
    return [tokenizer, encoder, ids](const DocumentSegment& segment, const InputBatch&,
                                     std::vector<uint32_t>& out) {
      ids->clear();
      encoder->encode(segment.text, *ids);
      out.insert(out.end(), ids->begin(), ids->end());  // 0 <= ids < vocab_size
    };
  };
}

}  // namespace

DatasetMeta prepare_bpe(const PrepareOptions& options, const std::vector<std::string>& files,
                        size_t total_bytes) {
  const bool trained = options.tokenizer_dir.empty();
  Progress progress(options.progress, total_bytes, trained ? 2 : 1);
  DatasetMeta meta;
  meta.vocab = VocabKind::kBpe;
  meta.val_fraction = options.val_fraction;
  meta.sources = files;
  meta.bpe = learn_or_read(options, files, progress);
  meta.vocab_size = meta.bpe->vocab_size();
  meta.eot_token = meta.bpe->eot_id();
  meta.tokenizer_source = trained ? fmt::format("bpe:{}", options.bpe_merges)
                                  : std::filesystem::absolute(options.tokenizer_dir).string();

  // vocab.json + merges.txt hold GPT-2's rules only; any other tokenizer came from a
  // tokenizer.json (vocab.json + merges.txt always give GPT-2's), which is kept as it is.
  const bool gpt2_files = meta.bpe->gpt2_rules();
  if (!gpt2_files) meta.tokenizer_json = "tokenizer.json";
  // The tokenizer's files are composed while the workers encode, off the serial path.
  std::future<TokenizerFileTexts> texts;
  if (gpt2_files) texts = std::async(std::launch::async, tokenizer_file_texts, std::cref(*meta.bpe));
  auto sink = make_token_sink(sink_options(options, meta.vocab_size));
  progress.start_pass(trained ? 2 : 1);
  encode_corpus(options, files, progress, {meta.bpe->eot_id(), meta.bpe->rules().eot_starts_documents},
                bpe_encoder(meta.bpe), *sink, meta);
  sink->finish(meta);
  if (gpt2_files) write_tokenizer_files(texts.get(), options.out_dir);
  else copy_tokenizer_json(options.tokenizer_dir + "/tokenizer.json", options.out_dir + "/" + meta.tokenizer_json);
  write_meta_file(meta, options.out_dir);
  return meta;
}

}  // namespace spmd
