// Opening and validating nanoGPT / llm.c token files (see token_file.h).
#include "data/token_file.h"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "util/error.h"

// Tokens are read in place from the mapping, which is only right on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian");

namespace spmd {
namespace {

constexpr int32_t kLlmCLlama3Magic = 20240801;  // llm.c's uint32-token shards: not supported

int32_t header_word(const MappedFile& map, size_t i) {
  int32_t v;
  std::memcpy(&v, map.data() + i * sizeof(int32_t), sizeof v);
  return v;
}

// A file whose first 1 KiB has the shape of an llm.c header (nonzero magic, version and count,
// then 253 zero words) but the wrong magic: a corrupt shard, not 506 zero tokens of nanoGPT data.
bool looks_like_llmc_header(const MappedFile& map) {
  if (map.size() < kLlmCHeaderBytes) return false;
  if (header_word(map, 0) == 0 || header_word(map, 1) == 0 || header_word(map, 2) == 0) return false;
  for (size_t i = 3; i < 256; ++i)
    if (header_word(map, i) != 0) return false;
  return true;
}

// The first token >= vocab_size, or -1. A branch-free max first so the common case vectorizes.
int64_t first_out_of_range(const uint16_t* tokens, int64_t n, int64_t vocab_size) {
  if (vocab_size > 65535) return -1;
  uint16_t max_id = 0;
  for (int64_t i = 0; i < n; ++i) max_id = std::max(max_id, tokens[i]);
  if (max_id < vocab_size) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] >= vocab_size) return i;
  return -1;
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

}  // namespace

TokenFile TokenFile::open(const std::string& path, int64_t vocab_size) {
  SPMD_CHECK(vocab_size >= 1, "{}: vocab_size must be positive, got {}", path, vocab_size);
  TokenFile file(MappedFile{path});
  const MappedFile& map = file.map_;
  SPMD_CHECK(map.size() > 0, "{}: empty token file", path);

  size_t data_offset = 0;
  if (map.size() >= sizeof(int32_t) && header_word(map, 0) == kLlmCMagic) {
    SPMD_CHECK(map.size() >= kLlmCHeaderBytes,
               "{}: truncated llm.c shard: {} bytes, the header alone needs {}", path, map.size(),
               kLlmCHeaderBytes);
    int32_t version = header_word(map, 1);
    SPMD_CHECK(version == kLlmCVersion,
               "{}: llm.c shard version {} is not supported (expected {}: uint16 tokens)", path,
               version, kLlmCVersion);
    size_t payload = map.size() - kLlmCHeaderBytes;
    SPMD_CHECK(payload % 2 == 0,
               "{}: truncated llm.c shard: {} payload bytes is not a whole number of uint16 tokens",
               path, payload);
    int64_t declared = header_word(map, 2);
    SPMD_CHECK(declared == static_cast<int64_t>(payload / 2),
               "{}: truncated or corrupt llm.c shard: header says {} tokens, file holds {}", path,
               declared, payload / 2);
    file.format_ = TokenFormat::kLlmC;
    data_offset = kLlmCHeaderBytes;
  } else if (looks_like_llmc_header(map)) {
    int32_t magic = header_word(map, 0);
    SPMD_CHECK(magic != kLlmCLlama3Magic,
               "{}: llm.c shard with uint32 tokens (magic {}) is not supported", path, magic);
    throw UsageError(fmt::format("{}: looks like an llm.c shard but its magic is {}, expected {}",
                                 path, magic, kLlmCMagic));
  } else {
    SPMD_CHECK(map.size() % 2 == 0,
               "{}: odd byte count {}: not a whole number of uint16 tokens (truncated?)", path,
               map.size());
    file.format_ = TokenFormat::kNanoGpt;
  }

  file.tokens_ = reinterpret_cast<const uint16_t*>(map.data() + data_offset);
  file.num_tokens_ = static_cast<int64_t>((map.size() - data_offset) / 2);
  SPMD_CHECK(file.num_tokens_ > 0, "{}: holds no tokens", path);
  int64_t bad = first_out_of_range(file.tokens_, file.num_tokens_, vocab_size);
  SPMD_CHECK(bad < 0, "{}: token {} at byte offset {} is {}, not below vocab_size {}", path, bad,
             data_offset + static_cast<size_t>(bad) * 2, file.tokens_[bad < 0 ? 0 : bad],
             vocab_size);
  return file;
}

std::vector<std::string> resolve_token_paths(const std::string& spec) {
  namespace fs = std::filesystem;
  SPMD_CHECK(!spec.empty(), "no token file given (empty data path)");
  std::vector<std::string> paths;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    // spmd-prepare's output directory holds train.bin and val.bin: reading both would train on val.
    SPMD_CHECK(!fs::exists(fs::path(spec) / "meta.json", ec),
               "{}: is a prepared dataset (it has meta.json): name its train.bin or val.bin", spec);
    for (const auto& entry : fs::directory_iterator(spec, ec))
      if (entry.is_regular_file() && entry.path().extension() == ".bin")
        paths.push_back(entry.path().string());
    SPMD_CHECK(!ec, "{}: cannot list directory: {}", spec, ec.message());
    SPMD_CHECK(!paths.empty(), "{}: directory holds no *.bin token files", spec);
  } else if (fs::exists(spec, ec)) {
    paths.push_back(spec);
  } else if (has_glob_chars(spec)) {
    glob_t g{};
    int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
      if (fs::is_regular_file(g.gl_pathv[i])) paths.push_back(g.gl_pathv[i]);
    ::globfree(&g);
    SPMD_CHECK(!paths.empty(), "{}: no token files match this pattern", spec);
  } else {
    throw UsageError(fmt::format("{}: no such token file or directory", spec));
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::shared_ptr<const TokenDataset> TokenDataset::open(const std::string& spec,
                                                       int64_t vocab_size) {
  std::shared_ptr<TokenDataset> data(new TokenDataset());
  data->spec_ = spec;
  data->vocab_size_ = vocab_size;
  for (const auto& path : resolve_token_paths(spec)) {
    data->files_.push_back(TokenFile::open(path, vocab_size));
    data->num_tokens_ += data->files_.back().num_tokens();
  }
  return data;
}

}  // namespace spmd
