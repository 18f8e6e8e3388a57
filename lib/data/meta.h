// meta.json of a prepared dataset: the vocabulary (token id -> character, bytes, or a byte-level
// BPE defined by vocab.json + merges.txt beside meta.json), its size, the token counts and the
// sources; plus encode/decode of text with that vocabulary. A BPE read from a tokenizer.json with
// more than GPT-2's rules keeps that file instead of vocab.json + merges.txt.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/token_width.h"

namespace spmd {

enum class VocabKind { kChar, kByte, kBpe };

class BpeTokenizer;

// A fine-tuning dataset (spmd-prepare --format): examples packed into windows of block_size
// tokens, each token file with a NAME.targets.bin beside it (one byte per token, 1 = target).
struct SftMeta {
  bool present = false;
  std::string format;         // "chat" or "prompt-completion"
  std::string train_on;       // "assistant", "completion" or "all"
  int64_t block_size = 0;     // the windows the examples were packed into: model.block_size must equal it
  bool packed = true;         // false: one example per window
  int64_t document_end = -1;  // the id that ends an example and pads a window (the document mask's)
  std::string chat_family;    // "chatml", "llama3", or "" for prompt/completion rows
  std::optional<std::string> default_system;  // ChatML: the template's default system turn
  int64_t examples = 0, dropped_long = 0;     // rows kept, rows longer than block_size dropped
  int64_t train_targets = 0, val_targets = 0;
};

struct DatasetMeta {
  VocabKind vocab = VocabKind::kChar;
  std::vector<char32_t> chars;        // char vocabulary: token id -> code point, sorted
  int64_t vocab_size = 0;             // chars.size(), 256 for bytes, the BPE ids (eot included)
  TokenWidth token_width = TokenWidth::kU16;  // "dtype": the token files' ids (uint32 past 65536 ids)
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  double val_fraction = 0.1;         // val's share of the tokens
  std::vector<std::string> sources;   // input files, in the order they were read
  // The token files beside meta.json: a file name, or a glob of llm.c shards of shard_tokens each.
  std::string train_file = "train.bin";
  std::string val_file = "val.bin";   // "" when there is no val split
  int64_t shard_tokens = 0;           // 0: one nanoGPT file each for train and val
  // What the input held: documents encoded, malformed JSON lines skipped (--skip-bad-lines),
  // documents that are not valid UTF-8 (encoded as their bytes).
  int64_t documents = 0;
  int64_t skipped_bad_lines = 0;
  int64_t non_utf8_documents = 0;
  // BPE only: the tokenizer files (relative to meta.json's directory), <|endoftext|>'s id, where
  // the tokenizer came from ("bpe:N" or the --tokenizer directory), and the tokenizer itself
  // (loaded by read_meta; prepare sets it too).
  std::string vocab_file = "vocab.json";
  std::string merges_file = "merges.txt";
  // Instead of those two: the tokenizer.json a tokenizer with more than GPT-2's rules came from
  // (a Llama 3 style split pattern, added tokens), copied beside meta.json as it was.
  std::string tokenizer_json;
  int64_t eot_token = -1;
  std::string tokenizer_source;
  std::shared_ptr<const BpeTokenizer> bpe;
  SftMeta sft;
};

// The fine_tuning entry of a meta.json alone (no tokenizer loaded); present = false without one.
// UsageError naming the file when it is not JSON or the entry is malformed.
SftMeta read_meta_fine_tuning(const std::string& path);

// NAME.targets.bin beside a token file NAME.bin: where a fine-tuning dataset keeps its targets.
std::string targets_path_of(const std::string& token_path);

nlohmann::json meta_to_json(const DatasetMeta& meta);
// `origin` names the file in error messages (UsageError for a malformed meta).
DatasetMeta meta_from_json(const nlohmann::json& j, const std::string& origin);
// Reads meta.json and, for BPE, the tokenizer files beside it (UsageError naming a broken one).
DatasetMeta read_meta(const std::string& path);
// The token width a meta.json names in "dtype" (nothing else read; no tokenizer loaded); nullopt
// when it names none (another tool's meta.json). UsageError naming the file when it is not JSON
// or its dtype is neither "uint16" nor "uint32".
std::optional<TokenWidth> meta_dtype(const std::string& path);

// Every file that defines the tokenizer, relative to meta.json's directory: {"meta.json"}, or
// {"meta.json", "vocab.json", "merges.txt"} for BPE ({"meta.json", "tokenizer.json"} for a
// tokenizer.json one). Copy these to take the tokenizer along.
std::vector<std::string> tokenizer_files(const DatasetMeta& meta);

// Token ids -> UTF-8 text (bytes as they are for the byte and BPE vocabularies, so a cut UTF-8
// sequence comes back as its bytes; BPE's eot id gives "<|endoftext|>"). UsageError on an id
// outside the vocabulary.
std::string decode(const DatasetMeta& meta, const std::vector<int64_t>& tokens);
// Text -> token ids (BPE: any bytes; never the eot id). UsageError on invalid UTF-8 or a character
// outside a char vocabulary.
std::vector<int64_t> encode(const DatasetMeta& meta, std::string_view text);

}  // namespace spmd
