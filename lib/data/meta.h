// meta.json of a prepared dataset: the vocabulary (token id -> character, or bytes), its size,
// the token counts and the sources; plus encode/decode of text with that vocabulary.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spmd {

enum class VocabKind { kChar, kByte };

struct DatasetMeta {
  VocabKind vocab = VocabKind::kChar;
  std::vector<char32_t> chars;        // char vocabulary: token id -> code point, sorted
  int64_t vocab_size = 0;             // chars.size(), or 256 for bytes
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  double val_fraction = 0.1;
  std::vector<std::string> sources;   // input files, in the order they were read
};

nlohmann::json meta_to_json(const DatasetMeta& meta);
// `origin` names the file in error messages (UsageError for a malformed meta).
DatasetMeta meta_from_json(const nlohmann::json& j, const std::string& origin);
DatasetMeta read_meta(const std::string& path);

// Token ids -> UTF-8 text (bytes as they are for the byte vocabulary). UsageError on an id outside
// the vocabulary.
std::string decode(const DatasetMeta& meta, const std::vector<int64_t>& tokens);
// Text -> token ids. UsageError on invalid UTF-8 or a character outside a char vocabulary.
std::vector<int64_t> encode(const DatasetMeta& meta, std::string_view text);

}  // namespace spmd
