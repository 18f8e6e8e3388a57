// Opening and validating nanoGPT / llm.c token files (see token_file.h).
#include "data/token_file.h"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "data/meta.h"
#include "util/error.h"

// Tokens are read in place from the mapping, which is only right on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian");

namespace spmd {
namespace {

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

// The width of an llm.c shard with this magic, or nullopt for another magic.
std::optional<TokenWidth> llmc_width_of_magic(int32_t magic) {
  for (TokenWidth w : {TokenWidth::kU16, TokenWidth::kU32})
    if (magic == llmc_magic(w)) return w;
  return std::nullopt;
}

// Validates an llm.c header of the given width; returns the token count.
int64_t check_llmc_header(const MappedFile& map, TokenWidth width) {
  const std::string& path = map.path();
  const char* type = dtype_name(width);
  SPMD_CHECK(map.size() >= kLlmCHeaderBytes, "{}: truncated llm.c shard: {} bytes, the header alone needs {}", path,
             map.size(), kLlmCHeaderBytes);
  const int32_t version = header_word(map, 1);
  SPMD_CHECK(version == llmc_version(width),
             "{}: llm.c shard version {} is not supported with magic {} (expected {}: {} tokens)", path, version,
             llmc_magic(width), llmc_version(width), type);
  const size_t payload = map.size() - kLlmCHeaderBytes;
  const size_t bytes = bytes_per_token(width);
  SPMD_CHECK(payload % bytes == 0,
             "{}: truncated llm.c shard: {} payload bytes is not a whole number of {} tokens ({} bytes each)", path,
             payload, type, bytes);
  const int64_t declared = header_word(map, 2);
  SPMD_CHECK(declared == static_cast<int64_t>(payload / bytes),
             "{}: truncated or corrupt llm.c shard: header says {} tokens, file holds {} {} tokens", path, declared,
             payload / bytes, type);
  return declared;
}

// The first token >= vocab_size, or -1. A branch-free max first so the common case vectorizes.
template <class Id>
int64_t first_out_of_range(const Id* tokens, int64_t n, int64_t vocab_size) {
  if (vocab_size > static_cast<int64_t>(std::numeric_limits<Id>::max())) return -1;
  Id max_id = 0;
  for (int64_t i = 0; i < n; ++i) max_id = std::max(max_id, tokens[i]);
  if (static_cast<int64_t>(max_id) < vocab_size) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (static_cast<int64_t>(tokens[i]) >= vocab_size) return i;
  return -1;
}

bool is_targets_file(const std::string& path) {
  const std::string suffix = ".targets.bin";
  return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// The dtype of the meta.json beside a token file (spmd-prepare's), or nullopt without one.
std::optional<TokenWidth> dtype_beside(const std::string& token_path) {
  const auto meta = std::filesystem::path(token_path).parent_path() / "meta.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(meta, ec)) return std::nullopt;
  return meta_dtype(meta.string());
}

// A fine-tuning file's targets (NAME.targets.bin, one byte per token), checked against its tokens.
MappedFile open_targets_beside(const TokenFile& file) {
  const std::string path = targets_path_of(file.path());
  SPMD_CHECK(file.format() == TokenFormat::kNanoGpt, "{}: targets beside an llm.c shard are not supported", path);
  MappedFile map(path);
  SPMD_CHECK(static_cast<int64_t>(map.size()) == file.num_tokens(),
             "{}: {} bytes, but {} holds {} tokens (one target byte per token; rerun spmd-prepare)", path, map.size(),
             file.path(), file.num_tokens());
  return map;
}

// The block size a fine-tuning file's examples were packed for (meta.json beside it); UsageError
// without one.
int64_t packed_block_beside(const std::string& token_path) {
  const auto meta = std::filesystem::path(token_path).parent_path() / "meta.json";
  std::error_code ec;
  SPMD_CHECK(std::filesystem::is_regular_file(meta, ec), "{}: has targets beside it but no meta.json to say the window "
             "its examples were packed into", token_path);
  const SftMeta sft = read_meta_fine_tuning(meta.string());
  SPMD_CHECK(sft.present && sft.block_size > 0, "{}: has {} beside it, but {} has no fine_tuning entry", token_path,
             targets_path_of(token_path), meta.string());
  return sft.block_size;
}

}  // namespace

TokenFile TokenFile::open(const std::string& path, int64_t vocab_size, TokenWidth flat_width) {
  SPMD_CHECK(vocab_size >= 1, "{}: vocab_size must be positive, got {}", path, vocab_size);
  TokenFile file(MappedFile{path});
  const MappedFile& map = file.map_;
  SPMD_CHECK(map.size() > 0, "{}: empty token file", path);

  size_t data_offset = 0;
  const auto llmc_width = map.size() >= sizeof(int32_t) ? llmc_width_of_magic(header_word(map, 0)) : std::nullopt;
  if (llmc_width) {
    file.num_tokens_ = check_llmc_header(map, *llmc_width);
    file.format_ = TokenFormat::kLlmC;
    file.width_ = *llmc_width;
    data_offset = kLlmCHeaderBytes;
  } else if (looks_like_llmc_header(map)) {
    throw UsageError(fmt::format("{}: looks like an llm.c shard but its magic is {}, expected {} (uint16 tokens) "
                                 "or {} (uint32 tokens)",
                                 path, header_word(map, 0), kLlmCMagic, kLlmCLlama3Magic));
  } else {
    const size_t bytes = bytes_per_token(flat_width);
    SPMD_CHECK(map.size() % bytes == 0, "{}: {} bytes is not a whole number of {} tokens ({} bytes each{}; truncated?)",
               path, map.size(), dtype_name(flat_width), bytes,
               flat_width == TokenWidth::kU32 ? ", as the dtype of the meta.json beside it says" : "");
    file.format_ = TokenFormat::kNanoGpt;
    file.width_ = flat_width;
    file.num_tokens_ = static_cast<int64_t>(map.size() / bytes);
  }

  file.tokens_ = map.data() + data_offset;
  SPMD_CHECK(file.num_tokens_ > 0, "{}: holds no tokens", path);
  const int64_t bad = file.visit([&](const auto* t) { return first_out_of_range(t, file.num_tokens_, vocab_size); });
  SPMD_CHECK(bad < 0, "{}: token {} at byte offset {} is {}, not below vocab_size {}", path, bad,
             data_offset + static_cast<size_t>(bad) * bytes_per_token(file.width_), file.token(bad < 0 ? 0 : bad),
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
      if (entry.is_regular_file() && entry.path().extension() == ".bin" && !is_targets_file(entry.path().string()))
        paths.push_back(entry.path().string());
    SPMD_CHECK(!ec, "{}: cannot list directory: {}", spec, ec.message());
    SPMD_CHECK(!paths.empty(), "{}: directory holds no *.bin token files", spec);
  } else if (fs::exists(spec, ec)) {
    paths.push_back(spec);
  } else if (has_glob_chars(spec)) {
    glob_t g{};
    int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
      if (fs::is_regular_file(g.gl_pathv[i]) && !is_targets_file(g.gl_pathv[i])) paths.push_back(g.gl_pathv[i]);
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
  std::map<std::string, std::optional<TokenWidth>> dtype_of_dir;  // a glob may span directories
  for (const auto& path : resolve_token_paths(spec)) {
    const std::string dir = std::filesystem::path(path).parent_path().string();
    if (!dtype_of_dir.count(dir)) dtype_of_dir[dir] = dtype_beside(path);
    const std::optional<TokenWidth> dtype = dtype_of_dir[dir];
    data->files_.push_back(TokenFile::open(path, vocab_size, dtype.value_or(TokenWidth::kU16)));
    const TokenFile& file = data->files_.back();
    SPMD_CHECK(!dtype || file.width() == *dtype,
               "{}: an llm.c shard of {} tokens, but the meta.json beside it says dtype {}", path,
               dtype_name(file.width()), dtype_name(*dtype));
    data->num_tokens_ += data->files_.back().num_tokens();
    std::error_code ec;
    const bool has_targets = std::filesystem::exists(targets_path_of(path), ec);
    SPMD_CHECK(data->files_.size() == 1 || has_targets == !data->target_maps_.empty(),
               "{}: its files mix fine-tuning data (NAME.targets.bin beside NAME.bin) and other token files", spec);
    if (!has_targets) continue;
    data->target_maps_.push_back(open_targets_beside(file));
    const int64_t block = packed_block_beside(path);
    SPMD_CHECK(data->packed_block_ == 0 || data->packed_block_ == block,
               "{}: its files were packed for windows of {} and {} tokens", spec, data->packed_block_, block);
    data->packed_block_ = block;
  }
  return data;
}

}  // namespace spmd
