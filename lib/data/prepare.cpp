// The two-pass prepare pipeline (see prepare.h): pass 1 finds the vocabulary and the token count,
// pass 2 encodes and writes the split. Inputs are memory-mapped, outputs streamed, so memory stays
// small whatever the corpus size.
#include "data/prepare.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "data/input_files.h"
#include "data/mapped_file.h"
#include "data/prepare_bpe.h"
#include "data/prepare_output.h"
#include "data/utf8.h"
#include "util/error.h"

namespace spmd {
namespace {

// Calls fn(code point) over a whole file; invalid UTF-8 is a UsageError naming file and offset.
template <class Fn>
void for_each_code_point(const MappedFile& file, Progress& progress, Fn&& fn) {
  const unsigned char* p = file.data();
  const size_t n = file.size();
  size_t pos = 0;
  while (pos < n) {
    const size_t start = pos;
    const size_t chunk_end = std::min(n, pos + kPrepareChunkBytes);
    while (pos < chunk_end) {
      if (p[pos] < 0x80) {  // ASCII fast path
        fn(char32_t(p[pos++]));
        continue;
      }
      char32_t cp = 0;
      size_t used = utf8_decode_one(p + pos, n - pos, cp);
      if (used == 0)
        throw UsageError(fmt::format(
            "{}: invalid UTF-8 at byte offset {} (use --vocab byte for non-UTF-8 input)",
            file.path(), pos));
      fn(cp);
      pos += used;
    }
    progress.add(pos - start);
  }
}

}  // namespace

DatasetMeta prepare(const PrepareOptions& options) {
  namespace fs = std::filesystem;
  SPMD_CHECK(!options.out_dir.empty(), "no output directory given (--out)");
  SPMD_CHECK(options.val_fraction >= 0 && options.val_fraction < 1,
             "--val-fraction must be in [0, 1), got {}", options.val_fraction);
  std::vector<std::string> files = collect_input_files(options.inputs, options.exclude);
  size_t total_bytes = 0;
  for (const auto& f : files) total_bytes += MappedFile(f).size();
  SPMD_CHECK(total_bytes > 0, "input is empty: {} file(s), all empty, starting with {}",
             files.size(), files.front());
  if (options.vocab == VocabKind::kBpe) return prepare_bpe(options, files, total_bytes);

  DatasetMeta meta;
  meta.vocab = options.vocab;
  meta.val_fraction = options.val_fraction;
  meta.sources = files;
  Progress progress(options.progress, total_bytes);
  const bool by_char = options.vocab == VocabKind::kChar;

  // Pass 1: the vocabulary and the token count.
  int64_t n_tokens = 0;
  std::vector<int32_t> id_of;  // code point -> token id (char vocabulary), -1 = unseen
  if (by_char) {
    std::vector<bool> seen(kMaxCodePoint + 1, false);
    for (const auto& f : files) {
      MappedFile map(f);
      for_each_code_point(map, progress, [&](char32_t cp) {
        seen[cp] = true;
        ++n_tokens;
      });
    }
    for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp)
      if (seen[cp]) meta.chars.push_back(cp);
    SPMD_CHECK(meta.chars.size() <= 65536,
               "the input has {} distinct characters, more than uint16 tokens hold: use --vocab byte",
               meta.chars.size());
    id_of.assign(kMaxCodePoint + 1, -1);
    for (size_t i = 0; i < meta.chars.size(); ++i) id_of[meta.chars[i]] = static_cast<int32_t>(i);
    meta.vocab_size = static_cast<int64_t>(meta.chars.size());
  } else {
    n_tokens = static_cast<int64_t>(total_bytes);
    meta.vocab_size = 256;
  }

  const int64_t n_train = split_train_val(meta, n_tokens, options.val_fraction);

  // Pass 2: encode and write.
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec)
    throw RuntimeError(fmt::format("{}: cannot create directory: {}", options.out_dir, ec.message()));
  const fs::path out(options.out_dir);
  OutputFile train((out / "train.bin").string());
  OutputFile val((out / "val.bin").string());
  SplitWriter writer(train, val, n_train);
  progress.start_pass(2);
  for (const auto& f : files) {
    MappedFile map(f);
    if (by_char) {
      for_each_code_point(map, progress, [&](char32_t cp) {
        if (id_of[cp] < 0)
          throw RuntimeError(fmt::format("{}: changed while being read (new character U+{:04X})",
                                         f, static_cast<uint32_t>(cp)));
        writer.put(static_cast<uint16_t>(id_of[cp]));
      });
    } else {
      for (size_t i = 0; i < map.size(); ++i) writer.put(map.data()[i]);
      progress.add(map.size());
    }
  }
  writer.flush();
  if (writer.written() != n_tokens)
    throw RuntimeError(fmt::format("input changed while being read: {} tokens, then {}", n_tokens,
                                   writer.written()));
  train.commit();
  val.commit();

  write_meta_file(meta, options.out_dir);
  return meta;
}

}  // namespace spmd
