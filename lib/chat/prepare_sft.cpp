// The fine-tuning prepare pipeline (see prepare_sft.h). Fine-tuning sets are small: the rows are
// read and encoded in order on one thread and the windows kept in memory until written.
#include "chat/prepare_sft.h"

#include <filesystem>

#include "chat/sft_pack.h"
#include "prepare/input_files.h"
#include "prepare/input_stream.h"
#include "prepare/prepare_output.h"
#include "tokenizer/bpe_files.h"
#include "util/error.h"

namespace spmd {
namespace {

namespace fs = std::filesystem;

std::string whole_input(const std::string& path) {
  InputStream in(path);
  std::string bytes;
  while (in.read(bytes, size_t{1} << 20) > 0) {
  }
  return bytes;
}

struct EncodedRows {
  std::vector<SftExample> examples;
  int64_t dropped_long = 0;
  std::string first_dropped;  // file:line of the first row dropped for its length
};

// Every row of every input, in order; rows longer than block_size are counted and left out.
EncodedRows encode_inputs(const std::vector<std::string>& files, const SftEncoder& encoder, int64_t block_size) {
  EncodedRows rows;
  for (const std::string& file : files) {
    const std::string bytes = whole_input(file);
    int64_t line_number = 0;
    for (size_t pos = 0; pos < bytes.size();) {
      size_t end = bytes.find('\n', pos);
      if (end == std::string::npos) end = bytes.size();
      const std::string_view line(bytes.data() + pos, end - pos);
      pos = end + 1;
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      const std::string where = fmt::format("{}:{}", file, line_number);
      SftExample example = encoder.encode_row(line, where);
      if (static_cast<int64_t>(example.ids.size()) > block_size) {
        if (rows.dropped_long++ == 0) rows.first_dropped = fmt::format("{} ({} tokens)", where, example.ids.size());
        continue;
      }
      rows.examples.push_back(std::move(example));
    }
  }
  return rows;
}

// ids and targets of windows [first, first + count), then one padding token.
void write_windows(const SftPacker& packer, int64_t first, int64_t count, int64_t block_size, TokenWidth width,
                   uint32_t pad, OutputFile& ids_file, OutputFile& targets_file, int64_t& targets) {
  const size_t begin = static_cast<size_t>(first * block_size), n = static_cast<size_t>(count * block_size);
  std::vector<uint32_t> ids(packer.ids().begin() + static_cast<std::ptrdiff_t>(begin),
                            packer.ids().begin() + static_cast<std::ptrdiff_t>(begin + n));
  std::vector<uint8_t> marks(packer.targets().begin() + static_cast<std::ptrdiff_t>(begin),
                             packer.targets().begin() + static_cast<std::ptrdiff_t>(begin + n));
  ids.push_back(pad);
  marks.push_back(0);
  targets = 0;
  for (uint8_t m : marks) targets += m;
  if (width == TokenWidth::kU32) {
    ids_file.write(ids.data(), ids.size() * sizeof(uint32_t));
  } else {
    std::vector<uint16_t> narrow(ids.begin(), ids.end());
    ids_file.write(narrow.data(), narrow.size() * sizeof(uint16_t));
  }
  targets_file.write(marks.data(), marks.size());
}

// The inputs, for messages about all of them.
std::string inputs_named(const std::vector<std::string>& files) {
  return files.size() == 1 ? files[0] : fmt::format("{} and {} more input(s)", files[0], files.size() - 1);
}

int64_t val_windows(int64_t windows, double val_fraction, const std::vector<std::string>& files) {
  if (val_fraction <= 0) return 0;
  const auto n = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(windows) * val_fraction + 0.5));
  SPMD_CHECK(n < windows, "{}: {} window(s) of examples are too few to keep {} for val (--val-fraction {}); add rows "
             "or use --val-fraction 0", inputs_named(files), windows, n, val_fraction);
  return n;
}

}  // namespace

BpeTokenizer read_fine_tuning_tokenizer(const std::string& dir) {
  const fs::path json = fs::path(dir) / "tokenizer.json";
  return fs::exists(json) ? read_tokenizer_json(json.string()) : read_tokenizer_dir(dir);
}

DatasetMeta prepare_sft(const SftPrepareOptions& options) {
  SPMD_CHECK(!options.out_dir.empty(), "no output directory given (--out)");
  SPMD_CHECK(!options.tokenizer_dir.empty(), "--format {} needs --tokenizer DIR", format_name(options.format));
  SPMD_CHECK(options.block_size >= 2, "--format {} needs --block-size N (N >= 2: the model's block_size)",
             format_name(options.format));
  SPMD_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, "--val-fraction must be in [0, 1), got {}",
             options.val_fraction);
  const std::vector<std::string> files = collect_input_files(options.inputs, {});
  DatasetMeta meta;
  meta.vocab = VocabKind::kBpe;
  meta.bpe = std::make_shared<const BpeTokenizer>(read_fine_tuning_tokenizer(options.tokenizer_dir));
  meta.vocab_size = meta.bpe->vocab_size();
  meta.eot_token = meta.bpe->eot_id();
  meta.tokenizer_source = fs::absolute(options.tokenizer_dir).string();
  meta.sources = files;
  meta.token_width = token_width_for_vocab(meta.vocab_size);
  std::optional<ChatTemplate> tmpl;
  if (options.format == SftFormat::kChat) tmpl = read_chat_template(options.tokenizer_dir);
  const TrainOn train_on =
      options.train_on.value_or(options.format == SftFormat::kChat ? TrainOn::kAssistant : TrainOn::kCompletion);
  const SftEncoder encoder(*meta.bpe, options.format, train_on, tmpl);

  const EncodedRows rows = encode_inputs(files, encoder, options.block_size);
  if (rows.dropped_long > 0 && options.progress)
    options.progress(fmt::format("dropped {} row(s) longer than --block-size {} (not cut), the first at {}",
                                 rows.dropped_long, options.block_size, rows.first_dropped));
  SPMD_CHECK(!rows.examples.empty(), "{}: no example to train on ({} row(s) longer than --block-size {} dropped{})",
             inputs_named(files), rows.dropped_long, options.block_size,
             rows.dropped_long > 0 ? ", the first at " + rows.first_dropped : "");
  SftPacker packer(options.block_size, static_cast<uint32_t>(encoder.document_end()), options.pack);
  for (const SftExample& e : rows.examples) packer.add(e);
  packer.finish();

  const auto pad = static_cast<uint32_t>(encoder.document_end());
  const int64_t windows = packer.windows(), n_val = val_windows(windows, options.val_fraction, files);
  fs::create_directories(options.out_dir);
  const fs::path out(options.out_dir);
  OutputFile train((out / "train.bin").string()), train_targets((out / "train.targets.bin").string());
  SftMeta& sft = meta.sft;
  write_windows(packer, 0, windows - n_val, options.block_size, meta.token_width, pad, train, train_targets, sft.train_targets);
  std::unique_ptr<OutputFile> val, val_targets;
  if (n_val > 0) {
    val = std::make_unique<OutputFile>((out / "val.bin").string());
    val_targets = std::make_unique<OutputFile>((out / "val.targets.bin").string());
    write_windows(packer, windows - n_val, n_val, options.block_size, meta.token_width, pad, *val, *val_targets,
                  sft.val_targets);
  }
  meta.train_tokens = (windows - n_val) * options.block_size + 1;
  meta.val_tokens = n_val > 0 ? n_val * options.block_size + 1 : 0;
  meta.val_fraction = static_cast<double>(n_val) / static_cast<double>(windows);
  meta.val_file = n_val > 0 ? "val.bin" : "";
  meta.documents = static_cast<int64_t>(rows.examples.size());
  sft.present = true;
  sft.format = format_name(options.format);
  sft.train_on = train_on_name(train_on);
  sft.block_size = options.block_size;
  sft.packed = options.pack;
  sft.document_end = encoder.document_end();
  sft.chat_family = tmpl ? (tmpl->family == ChatFamily::kChatMl ? "chatml" : "llama3") : "";
  if (tmpl) sft.default_system = tmpl->default_system;
  sft.examples = static_cast<int64_t>(rows.examples.size());
  sft.dropped_long = rows.dropped_long;

  if (meta.bpe->gpt2_rules()) {
    write_vocab_and_merges(*meta.bpe, options.out_dir);
  } else {
    meta.tokenizer_json = "tokenizer.json";
    copy_tokenizer_json((fs::path(options.tokenizer_dir) / "tokenizer.json").string(), (out / "tokenizer.json").string());
  }
  train.commit();
  train_targets.commit();
  if (val) val->commit(), val_targets->commit();
  write_meta_file(meta, options.out_dir);
  return meta;
}

}  // namespace spmd
