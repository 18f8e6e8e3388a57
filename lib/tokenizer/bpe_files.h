// Hugging Face's files for a GPT-2 style tokenizer: vocab.json (byte-level string -> id) with
// merges.txt ("#version" line, then "left right" per rank), or tokenizer.json (model.vocab and
// model.merges, merges as "a b" strings or [a, b] pairs). A tokenizer.json may also be Llama 3's
// kind: a Sequence pre-tokenizer of a Split (its Regex) and a ByteLevel, added_tokens (found in
// text as tokenizers finds them), ignore_merges, and a post_processor template whose start token
// (<|begin_of_text|>) then separates documents. A vocabulary without <|endoftext|> and without such
// a start token gets <|endoftext|> appended as the last id. Any defect is a UsageError naming the
// file (and line for merges.txt, the field for tokenizer.json: what is not supported).
#pragma once
#include <string>

#include "tokenizer/bpe.h"

namespace spmd {

BpeTokenizer read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path);
BpeTokenizer read_tokenizer_json(const std::string& path);
// DIR/vocab.json + DIR/merges.txt when both exist, else DIR/tokenizer.json.
BpeTokenizer read_tokenizer_dir(const std::string& dir);

// The contents of vocab.json (ordered by id) and merges.txt in Hugging Face's format.
struct TokenizerFileTexts {
  std::string vocab_json, merges_txt;
};
TokenizerFileTexts tokenizer_file_texts(const BpeTokenizer& tokenizer);
// Writes dir/vocab.json and dir/merges.txt, each under a temporary name then renamed.
// RuntimeError if a write fails.
void write_tokenizer_files(const TokenizerFileTexts& texts, const std::string& dir);

// Copies a tokenizer.json as it is to `to` (under a temporary name then renamed). RuntimeError
// if the read or the write fails.
void copy_tokenizer_json(const std::string& from, const std::string& to);

// Both at once: write_tokenizer_files(tokenizer_file_texts(tokenizer), dir).
void write_vocab_and_merges(const BpeTokenizer& tokenizer, const std::string& dir);

}  // namespace spmd
