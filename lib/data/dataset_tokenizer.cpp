#include "data/dataset_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "data/meta.h"
#include "data/token_file.h"
#include "util/durable_file.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace spmd {

std::string dataset_meta_path(const std::string& data_spec) {
  std::vector<std::string> paths;
  try {
    paths = resolve_token_paths(data_spec);
  } catch (const UsageError&) {
    return "";
  }
  const fs::path meta = fs::path(paths.front()).parent_path() / "meta.json";
  std::error_code ec;
  return fs::is_regular_file(meta, ec) ? meta.string() : "";
}

void copy_tokenizer(const std::string& meta_path, const std::string& dest_dir) {
  const fs::path dir = fs::path(meta_path).parent_path();
  std::error_code ec;
  fs::create_directories(dest_dir, ec);
  for (const std::string& name : tokenizer_files(read_meta(meta_path))) {
    std::ifstream in(dir / name, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    if (!in.good() && !in.eof()) throw RuntimeError(fmt::format("cannot read the tokenizer file {}", (dir / name).string()));
    write_file_durably((fs::path(dest_dir) / name).string(), contents.str());  // checkpoints are fsynced whole
  }
  fsync_directory(dest_dir);
}

}  // namespace spmd
