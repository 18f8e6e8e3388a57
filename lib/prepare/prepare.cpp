// prepare's top level (see prepare.h): inputs, the char and byte vocabularies, the outputs. The
// char vocabulary takes two passes (its characters, then the encoding), the byte vocabulary one;
// BPE is in prepare_bpe.cpp. Inputs are streamed and outputs written as they come, so memory stays
// small whatever the corpus size.
#include "prepare/prepare.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "prepare/input_files.h"
#include "prepare/prepare_bpe.h"
#include "prepare/prepare_encode.h"
#include "prepare/prepare_pass.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace spmd {
namespace {

// Calls fn(code point, byte position) over a segment; invalid UTF-8 is a UsageError naming the
// file and the byte offset.
template <class Fn>
void for_each_code_point(const DocumentSegment& segment, const InputBatch& batch,
                         const std::vector<std::string>& files, Fn&& fn) {
  const auto* p = reinterpret_cast<const unsigned char*>(segment.text.data());
  const size_t n = segment.text.size();
  for (size_t pos = 0; pos < n;) {
    char32_t cp = p[pos];
    const size_t used = cp < 0x80 ? 1 : utf8_decode_one(p + pos, n - pos, cp);
    if (used == 0)
      throw UsageError(
          fmt::format("{}: invalid UTF-8 at byte offset {} (use --vocab byte for non-UTF-8 input)",
                      files[batch.file_index], batch.offset + pos));
    fn(cp);
    pos += used;
  }
}

// Pass 1 of the char vocabulary: the sorted set of code points in the corpus.
std::vector<char32_t> collect_characters(const PrepareOptions& options,
                                         const std::vector<std::string>& files,
                                         Progress& progress) {
  const DocumentOptions doc_options{options.json_key, options.skip_bad_lines};
  using Seen = std::vector<char32_t>;  // the distinct code points of one batch
  auto make_job = [&]() -> std::function<Seen(InputBatch&)> {
    return [&files, doc_options](InputBatch& batch) {
      std::vector<bool> bit(kMaxCodePoint + 1, false);
      Seen seen;
      for (const auto& segment : split_documents(batch, files, doc_options).segments)
        for_each_code_point(segment, batch, files, [&](char32_t cp) {
          if (!bit[cp]) seen.push_back(cp);
          bit[cp] = true;
        });
      return seen;
    };
  };
  std::vector<bool> seen(kMaxCodePoint + 1, false);
  auto consume = [&](Seen& batch, PassTotals&) {
    for (char32_t cp : batch) seen[cp] = true;
  };
  run_corpus_pass<Seen>(options, files, progress, make_job, consume);
  std::vector<char32_t> chars;
  for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp)
    if (seen[cp]) chars.push_back(cp);
  return chars;  // at most the 1,114,112 code points: uint32 tokens past 65536 of them
}

std::function<SegmentEncoder()> char_encoder(const std::vector<char32_t>& chars,
                                             const std::vector<std::string>& files) {
  auto id_of = std::make_shared<std::vector<int32_t>>(kMaxCodePoint + 1, -1);
  for (size_t i = 0; i < chars.size(); ++i) (*id_of)[chars[i]] = static_cast<int32_t>(i);
  return [id_of, &files]() -> SegmentEncoder {
    return [id_of, &files](const DocumentSegment& segment, const InputBatch& batch,
                           std::vector<uint32_t>& out) {
      for_each_code_point(segment, batch, files, [&](char32_t cp) {
        if ((*id_of)[cp] < 0)
          throw RuntimeError(fmt::format("{}: changed while being read (new character U+{:04X})",
                                         files[batch.file_index], static_cast<uint32_t>(cp)));
        out.push_back(static_cast<uint32_t>((*id_of)[cp]));
      });
    };
  };
}

SegmentEncoder byte_encoder() {
  return [](const DocumentSegment& segment, const InputBatch&, std::vector<uint32_t>& out) {
    out.insert(out.end(), reinterpret_cast<const unsigned char*>(segment.text.data()),
               reinterpret_cast<const unsigned char*>(segment.text.data()) + segment.text.size());
  };
}

void check_options(const PrepareOptions& options) {
  SPMD_CHECK(!options.out_dir.empty(), "no output directory given (--out)");
  SPMD_CHECK(options.val_fraction >= 0 && options.val_fraction < 1,
             "--val-fraction must be in [0, 1), got {}", options.val_fraction);
  SPMD_CHECK(options.shard_tokens >= 0, "--shard-tokens must be positive, got {}",
             options.shard_tokens);
  SPMD_CHECK(!options.json_key.empty(), "--json-key must not be empty");
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

DatasetMeta prepare(const PrepareOptions& options) {
  check_options(options);
  std::vector<std::string> files = collect_input_files(options.inputs, options.exclude);
  uint64_t total_bytes = 0;
  for (const auto& f : files) total_bytes += std::filesystem::file_size(f);
  SPMD_CHECK(total_bytes > 0, "input is empty: {} file(s), all empty, starting with {}",
             files.size(), files.front());
  if (options.vocab == VocabKind::kBpe) return prepare_bpe(options, files, total_bytes);

  DatasetMeta meta;
  meta.vocab = options.vocab;
  meta.val_fraction = options.val_fraction;
  meta.sources = files;
  const bool by_char = options.vocab == VocabKind::kChar;
  Progress progress(options.progress, total_bytes, by_char ? 2 : 1);
  std::function<SegmentEncoder()> make_encoder = byte_encoder;
  meta.vocab_size = 256;
  if (by_char) {
    meta.chars = collect_characters(options, files, progress);
    meta.vocab_size = static_cast<int64_t>(meta.chars.size());
    make_encoder = char_encoder(meta.chars, files);
    progress.start_pass(2);
  }
  auto sink = make_token_sink(sink_options(options, meta.vocab_size));
  encode_corpus(options, files, progress, {}, make_encoder, *sink, meta);
  sink->finish(meta);
  write_meta_file(meta, options.out_dir);
  return meta;
}

}  // namespace spmd
