// The BPE prepare pipeline (see prepare_bpe.h). The token count is only known after encoding, so
// every token goes to train.bin's temporary file first; the val tail is then copied out to
// val.bin and train.bin truncated. Inputs are memory-mapped and cut at safe word boundaries
// (next_safe_cut), so memory stays small whatever the corpus size.
#include "data/prepare_bpe.h"

#include <filesystem>
#include <memory>

#include "data/bpe_files.h"
#include "data/bpe_train.h"
#include "data/mapped_file.h"
#include "data/prepare_output.h"
#include "util/error.h"

namespace spmd {
namespace {

// Calls fn(chunk) over a file in pieces of about kPrepareChunkBytes that split no word.
template <class Fn>
void for_each_chunk(const MappedFile& file, Progress& progress, Fn&& fn) {
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = next_safe_cut(text, pos + kPrepareChunkBytes);
    fn(text.substr(pos, end - pos));
    progress.add(end - pos);
    pos = end;
  }
}

std::shared_ptr<const BpeTokenizer> learn_or_read(const PrepareOptions& options,
                                                  const std::vector<std::string>& files,
                                                  Progress& progress) {
  if (!options.tokenizer_dir.empty())
    return std::make_shared<const BpeTokenizer>(read_tokenizer_dir(options.tokenizer_dir));
  SPMD_CHECK(options.bpe_merges >= 0 && options.bpe_merges <= 65536 - 257,
             "--vocab bpe:{}: N must be in [0, {}] so that the 256 bytes, N merges and "
             "<|endoftext|> fit uint16 tokens",
             options.bpe_merges, 65536 - 257);
  BpeTrainer trainer;
  for (const auto& f : files)
    for_each_chunk(MappedFile(f), progress, [&](std::string_view chunk) { trainer.add_text(chunk); });
  return std::make_shared<const BpeTokenizer>(trainer.train(options.bpe_merges, options.progress));
}

// Encodes every file into `out` (eot between files); returns the token count.
int64_t encode_files(const BpeTokenizer& tokenizer, const std::vector<std::string>& files,
                     Progress& progress, OutputFile& out) {
  BpeEncoder encoder(tokenizer);
  std::vector<int32_t> ids;
  std::vector<uint16_t> buffer;
  int64_t n_tokens = 0;
  auto write = [&] {
    buffer.assign(ids.begin(), ids.end());  // ids < vocab_size <= 65536 (checked)
    out.write(buffer.data(), buffer.size() * 2);
    n_tokens += static_cast<int64_t>(ids.size());
    ids.clear();
  };
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) ids.push_back(tokenizer.eot_id());
    for_each_chunk(MappedFile(files[i]), progress, [&](std::string_view chunk) {
      encoder.encode(chunk, ids);
      write();
    });
  }
  write();
  return n_tokens;
}

// Moves the tokens after the first n_train of `all` (closed) into `val`, then truncates `all`.
void split_tail(OutputFile& all, int64_t n_train, OutputFile& val) {
  {
    MappedFile map(all.tmp_path());
    val.write(map.data() + n_train * 2, map.size() - static_cast<size_t>(n_train) * 2);
  }
  std::error_code ec;
  std::filesystem::resize_file(all.tmp_path(), static_cast<uintmax_t>(n_train) * 2, ec);
  if (ec) throw RuntimeError(fmt::format("{}: cannot truncate: {}", all.tmp_path(), ec.message()));
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
  SPMD_CHECK(meta.vocab_size <= 65536,
             "the tokenizer has {} ids, more than uint16 tokens hold (train.bin stores uint16)",
             meta.vocab_size);

  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec)
    throw RuntimeError(fmt::format("{}: cannot create directory: {}", options.out_dir, ec.message()));
  const std::filesystem::path out(options.out_dir);
  OutputFile train((out / "train.bin").string());
  OutputFile val((out / "val.bin").string());
  progress.start_pass(trained ? 2 : 1);
  const int64_t n_tokens = encode_files(*meta.bpe, files, progress, train);
  train.close();

  const int64_t n_train = split_train_val(meta, n_tokens, options.val_fraction);
  split_tail(train, n_train, val);
  train.commit();
  val.commit();
  write_vocab_and_merges(*meta.bpe, options.out_dir);
  write_meta_file(meta, options.out_dir);
  return meta;
}

}  // namespace spmd
