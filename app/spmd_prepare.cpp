// spmd-prepare: UTF-8 text files -> train.bin / val.bin / meta.json for training (argument parsing
// only; the work is spmd::prepare in lib/data/prepare.h). Exit codes: 0 ok, 2 usage, 1 runtime.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "data/bpe.h"
#include "data/meta.h"
#include "data/prepare.h"
#include "util/guarded_main.h"

namespace {

struct PrepareArgs {
  spmd::PrepareOptions options;
  std::string vocab = "char";
  bool quiet = false;
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
    case spmd::VocabKind::kBpe:
      return fmt::format("byte-level BPE from {}, {} merges, <|endoftext|> = {}; tokenizer in {} + "
                         "{}",
                         meta.tokenizer_source, meta.bpe->merges().size(), meta.eot_token, meta.vocab_file, meta.merges_file);
  }
  return "?";
}

void setup_prepare(CLI::App& app, PrepareArgs& args) {
  auto& opt = args.options;
  app.add_option("--input", opt.inputs, "Text files or directories (walked recursively)")
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
}

int run_prepare(PrepareArgs& args) {
  auto& opt = args.options;
  apply_vocab(args);
  if (!args.quiet)
    opt.progress = [](const std::string& line) { std::cerr << "spmd-prepare: " << line << std::endl; };
  spmd::DatasetMeta meta = spmd::prepare(opt);
  fmt::print("spmd-prepare: {} file(s) -> {}: vocab_size {} ({}), train.bin {} tokens, val.bin {} "
             "tokens\n",
             meta.sources.size(), opt.out_dir, meta.vocab_size, describe_vocab(meta),
             meta.train_tokens, meta.val_tokens);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return spmd::guarded_main("spmd-prepare", [&] {
    CLI::App app{"spmd-prepare: UTF-8 text files -> nanoGPT-layout token files (train.bin, "
                 "val.bin) and meta.json"};
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
