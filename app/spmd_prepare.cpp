// spmd-prepare: UTF-8 text files -> train.bin / val.bin / meta.json for training (argument parsing
// only; the work is spmd::prepare in lib/data/prepare.h). Exit codes: 0 ok, 2 usage, 1 runtime.
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>

#include "data/prepare.h"
#include "util/error.h"

int main(int argc, char** argv) {
  spmd::PrepareOptions options;
  std::string vocab = "char";
  CLI::App app{"Turn UTF-8 text files into nanoGPT-layout token files (train.bin, val.bin) and "
               "meta.json."};
  app.add_option("--input", options.inputs, "Text files or directories (walked recursively)")
      ->required()
      ->expected(1, -1);
  app.add_option("--out", options.out_dir, "Output directory")->required();
  app.add_option("--vocab", vocab, "char: the input's Unicode characters; byte: the 256 bytes")
      ->check(CLI::IsMember({"char", "byte"}))
      ->capture_default_str();
  app.add_option("--val-fraction", options.val_fraction, "Fraction of the tokens kept for val")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  app.add_option("--exclude", options.exclude,
                 "Glob of input files/directories to skip (name, relative or full path)")
      ->expected(1, -1);
  bool quiet = false;
  app.add_flag("--quiet", quiet, "No progress lines");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;
  }

  options.vocab = vocab == "byte" ? spmd::VocabKind::kByte : spmd::VocabKind::kChar;
  if (!quiet) options.progress = [](const std::string& line) { std::cerr << "spmd-prepare: " << line << std::endl; };
  try {
    spmd::DatasetMeta meta = spmd::prepare(options);
    std::cout << fmt::format(
        "spmd-prepare: {} file(s) -> {}: vocab_size {} ({}), train.bin {} tokens, val.bin {} "
        "tokens\n",
        meta.sources.size(), options.out_dir, meta.vocab_size,
        meta.vocab == spmd::VocabKind::kByte ? "byte" : "char", meta.train_tokens,
        meta.val_tokens);
    return 0;
  } catch (const spmd::UsageError& e) {
    std::cerr << "spmd-prepare: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "spmd-prepare: error: " << e.what() << "\n";
    return 1;
  }
}
