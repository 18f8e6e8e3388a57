// spmd-prepare: UTF-8 text files -> train.bin / val.bin / meta.json for training (argument parsing
// only; the work is spmd::prepare in lib/data/prepare.h). Exit codes: 0 ok, 2 usage, 1 runtime.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "data/prepare.h"
#include "util/guarded_main.h"

namespace {

struct PrepareArgs {
  spmd::PrepareOptions options;
  std::string vocab = "char";
  bool quiet = false;
};

void setup_prepare(CLI::App& app, PrepareArgs& args) {
  auto& opt = args.options;
  app.add_option("--input", opt.inputs, "Text files or directories (walked recursively)")
      ->required()
      ->expected(1, -1);
  app.add_option("--out", opt.out_dir, "Output directory")->required();
  app.add_option("--vocab", args.vocab, "char: the input's Unicode characters; byte: the 256 bytes")
      ->check(CLI::IsMember({"char", "byte"}))
      ->capture_default_str();
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
  opt.vocab = args.vocab == "byte" ? spmd::VocabKind::kByte : spmd::VocabKind::kChar;
  if (!args.quiet)
    opt.progress = [](const std::string& line) { std::cerr << "spmd-prepare: " << line << std::endl; };
  spmd::DatasetMeta meta = spmd::prepare(opt);
  fmt::print("spmd-prepare: {} file(s) -> {}: vocab_size {} ({}), train.bin {} tokens, val.bin {} "
             "tokens\n",
             meta.sources.size(), opt.out_dir, meta.vocab_size,
             meta.vocab == spmd::VocabKind::kByte ? "byte" : "char", meta.train_tokens,
             meta.val_tokens);
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
