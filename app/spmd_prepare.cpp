// spmd-prepare: a corpus (text, JSON Lines; plain, gzip, zstd) -> token files and meta.json for
// training (argument parsing only; the work is spmd::prepare in lib/prepare/prepare.h).
// Exit codes: 0 ok, 2 usage, 1 runtime (a Ctrl-C included: nothing is left behind).
#include <csignal>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "chat/prepare_sft.h"
#include "tokenizer/bpe.h"
#include "data/meta.h"
#include "prepare/prepare.h"
#include "util/error.h"
#include "util/guarded_main.h"

namespace {

struct PrepareArgs {
  spmd::PrepareOptions options;
  std::string vocab = "char";
  bool quiet = false;
  // Fine-tuning rows (--format): the rest of the options are spmd::PrepareOptions'.
  std::string format = "text";
  std::string train_on;
  int64_t block_size = 0;
  bool unpacked = false;
};

// "char", "byte" or "bpe:N" (N merges, a decimal integer); "" when valid, else the complaint.
std::string check_vocab(const std::string& v) {
  if (v == "char" || v == "byte") return "";
  const std::string digits = v.rfind("bpe:", 0) == 0 ? v.substr(4) : "";
  if (!digits.empty() && digits.size() <= 6 &&
      digits.find_first_not_of("0123456789") == std::string::npos)
    return "";
  return "--vocab must be char, byte or bpe:N (N merges to learn, e.g. bpe:50000), got " + v;
}

// Sets options.vocab (and bpe_merges / tokenizer_dir) from the parsed arguments.
void apply_vocab(PrepareArgs& args) {
  auto& opt = args.options;
  if (!opt.tokenizer_dir.empty()) opt.vocab = spmd::VocabKind::kBpe;
  else if (args.vocab == "byte") opt.vocab = spmd::VocabKind::kByte;
  else if (args.vocab == "char") opt.vocab = spmd::VocabKind::kChar;
  else {
    opt.vocab = spmd::VocabKind::kBpe;
    opt.bpe_merges = std::stoll(args.vocab.substr(4));
  }
}

std::string describe_vocab(const spmd::DatasetMeta& meta) {
  switch (meta.vocab) {
    case spmd::VocabKind::kByte: return "byte";
    case spmd::VocabKind::kChar: return "char";
    case spmd::VocabKind::kBpe: {
      const std::string files =
          meta.tokenizer_json.empty() ? meta.vocab_file + " + " + meta.merges_file : meta.tokenizer_json;
      return fmt::format("byte-level BPE from {}, {} merges, <|endoftext|> = {}; tokenizer in {}",
                         meta.tokenizer_source, meta.bpe->merges().size(), meta.eot_token, files);
    }
  }
  return "?";
}

volatile std::sig_atomic_t g_interrupted = 0;

// The first SIGINT/SIGTERM asks prepare to stop and clean up; a second one kills at once.
void install_interrupt_handlers() {
  auto handler = [](int sig) {
    if (g_interrupted != 0) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
    g_interrupted = 1;
  };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
}

void setup_corpus_options(CLI::App& app, PrepareArgs& args) {
  auto& opt = args.options;
  app.add_option("--json-key", opt.json_key,
                 "JSON Lines inputs (*.jsonl, *.ndjson): the field that holds the document")
      ->capture_default_str();
  app.add_flag("--skip-bad-lines", opt.skip_bad_lines,
               "Count and skip malformed JSON lines instead of stopping at the first");
  app.add_option("--workers", opt.workers,
                 "Encoding threads (default: the cores available); the output does not depend on it")
      ->check(CLI::Range(1, 1024));
  auto* shards = app.add_option("--shard-tokens", opt.shard_tokens,
                                "Write llm.c shards of this many tokens (train_000000.bin, ...; "
                                "val first: val_000000.bin, ...) instead of train.bin/val.bin; "
                                "GPT-2's uint16 shards, Llama 3's uint32 ones past 65536 ids")
                     ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  auto* val_tokens = app.add_option("--val-tokens", opt.val_tokens,
                                    "Tokens kept for val (default with --shard-tokens: one shard)")
                         ->check(CLI::Range(int64_t{0}, int64_t{1} << 62));
  app.get_option("--val-fraction")->excludes(val_tokens)->excludes(shards);
}

void setup_fine_tuning_options(CLI::App& app, PrepareArgs& args) {
  app.add_option("--format", args.format,
                 "text: documents (pretraining); prompt-completion: JSON Lines rows {\"prompt\", \"completion\"}; "
                 "chat: rows {\"messages\": [{\"role\", \"content\"}]} rendered by the --tokenizer folder's chat "
                 "template. Both fine-tuning formats pack examples into windows of --block-size tokens and write "
                 "NAME.targets.bin beside each NAME.bin (docs/fine-tuning.md)")
      ->check(CLI::IsMember({"text", "prompt-completion", "chat"}))
      ->capture_default_str();
  app.add_option("--train-on", args.train_on,
                 "Which tokens are targets: assistant (chat's default: each assistant message and its end-of-turn "
                 "token), completion (prompt-completion's default: the completion and an end-of-text token), all")
      ->check(CLI::IsMember({"assistant", "completion", "all"}));
  app.add_option("--block-size", args.block_size, "Fine-tuning: the window the examples are packed into (the model's "
                 "block_size); longer rows are dropped and counted")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 30));
  app.add_flag("--unpacked", args.unpacked, "Fine-tuning: one example per window (padded) instead of packing them");
}

// --format prompt-completion|chat: spmd::prepare_sft.
int run_prepare_sft(PrepareArgs& args) {
  const spmd::PrepareOptions& opt = args.options;
  SPMD_CHECK(opt.shard_tokens == 0 && opt.val_tokens < 0 && opt.exclude.empty() && !opt.skip_bad_lines &&
                 opt.json_key == "text",
             "--shard-tokens, --val-tokens, --exclude, --skip-bad-lines and --json-key are for text corpora, not "
             "--format {} (a bad row stops it, naming file:line; --val-fraction splits by windows)", args.format);
  spmd::SftPrepareOptions sft;
  sft.inputs = args.options.inputs;
  sft.out_dir = args.options.out_dir;
  sft.tokenizer_dir = args.options.tokenizer_dir;
  sft.format = args.format == "chat" ? spmd::SftFormat::kChat : spmd::SftFormat::kPromptCompletion;
  if (args.train_on == "assistant") sft.train_on = spmd::TrainOn::kAssistant;
  if (args.train_on == "completion") sft.train_on = spmd::TrainOn::kCompletion;
  if (args.train_on == "all") sft.train_on = spmd::TrainOn::kAll;
  sft.block_size = args.block_size;
  sft.pack = !args.unpacked;
  sft.val_fraction = args.options.val_fraction;
  sft.progress = [](const std::string& line) { std::cerr << "spmd-prepare: " << line << std::endl; };
  const spmd::DatasetMeta meta = spmd::prepare_sft(sft);
  const spmd::SftMeta& f = meta.sft;
  fmt::print("spmd-prepare: {} {} example(s){} -> {}: windows of {} tokens ({}), {} train tokens ({} targets), "
             "{} val tokens ({} targets); targets: {}; an example ends with id {}\n",
             f.examples, f.format, f.dropped_long > 0 ? fmt::format(" ({} longer than --block-size dropped)", f.dropped_long) : "",
             sft.out_dir, f.block_size, f.packed ? "packed" : "one example each", meta.train_tokens, f.train_targets,
             meta.val_tokens, f.val_targets, f.train_on, f.document_end);
  return 0;
}

void setup_prepare(CLI::App& app, PrepareArgs& args) {
  auto& opt = args.options;
  app.add_option("--input", opt.inputs,
                 "Text or JSON Lines files (also .gz, .zst), directories (walked recursively) and "
                 "globs")
      ->required()
      ->expected(1, -1);
  app.add_option("--out", opt.out_dir, "Output directory")->required();
  auto* vocab = app.add_option("--vocab", args.vocab,
                                "char: the input's Unicode characters; byte: the 256 bytes; "
                                "bpe:N: GPT-2's byte-level BPE with N merges learned from the input")
                    ->check(CLI::Validator(check_vocab, "char|byte|bpe:N", "vocab"))
                    ->capture_default_str();
  app.add_option("--tokenizer", opt.tokenizer_dir,
                 "Encode with GPT-2 style Hugging Face files in DIR (vocab.json + merges.txt, or "
                 "tokenizer.json)")
      ->check(CLI::ExistingDirectory)
      ->excludes(vocab);
  app.add_option("--val-fraction", opt.val_fraction, "Fraction of the tokens kept for val")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  app.add_option("--exclude", opt.exclude,
                 "Glob of input files/directories to skip (name, relative or full path)")
      ->expected(1, -1);
  app.add_flag("--quiet", args.quiet, "No progress lines");
  setup_corpus_options(app, args);
  setup_fine_tuning_options(app, args);
}

int run_prepare(PrepareArgs& args) {
  auto& opt = args.options;
  if (args.format != "text") return run_prepare_sft(args);
  SPMD_CHECK(args.train_on.empty() && args.block_size == 0 && !args.unpacked,
             "--train-on, --block-size and --unpacked are for fine-tuning rows (--format prompt-completion|chat)");
  apply_vocab(args);
  if (!args.quiet)
    opt.progress = [](const std::string& line) { std::cerr << "spmd-prepare: " << line << std::endl; };
  install_interrupt_handlers();
  opt.cancelled = [] { return g_interrupted != 0; };
  spmd::DatasetMeta meta = spmd::prepare(opt);
  fmt::print("spmd-prepare: {} file(s), {} documents -> {}: vocab_size {} ({}), {} tokens{}, {} {} tokens, {} {} "
             "tokens\n",
             meta.sources.size(), meta.documents, opt.out_dir, meta.vocab_size, describe_vocab(meta),
             spmd::dtype_name(meta.token_width),
             meta.token_width == spmd::TokenWidth::kU32 ? " (more than 65536 ids)" : "", meta.train_file,
             meta.train_tokens, meta.val_file.empty() ? "val" : meta.val_file, meta.val_tokens);
  if (meta.skipped_bad_lines > 0 || meta.non_utf8_documents > 0)
    fmt::print("spmd-prepare: skipped {} malformed JSON line(s); {} document(s) not valid UTF-8, "
               "encoded as bytes\n",
               meta.skipped_bad_lines, meta.non_utf8_documents);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return spmd::guarded_main("spmd-prepare", [&] {
    CLI::App app{"spmd-prepare: text and JSON Lines files (plain, gzip, zstd) -> token files "
                 "(train.bin and val.bin, or llm.c shards) and meta.json"};
    PrepareArgs args;
    setup_prepare(app, args);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);  // prints the help or the error
      return code == 0 ? 0 : 2;
    }
    return run_prepare(args);
  });
}
