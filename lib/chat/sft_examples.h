// Fine-tuning rows -> token ids and which of them are targets (the tokens the loss trains on).
// A row is one JSON line: {"prompt": ..., "completion": ...} or {"messages": [{"role", "content"}]}.
// The ids are the rendered text tokenized without added special tokens (a Llama 3 template writes
// <|begin_of_text|> itself); a token is a target when its bytes overlap a target range of the text,
// as transformers' return_assistant_tokens_mask marks the tokens of a {% generation %} block.
//   chat, assistant:         each assistant message's content and its end-of-turn token;
//   prompt-completion:       the completion, then one end-of-text token (a target) after it;
//   all:                     every token but the first (nothing in the example predicts it).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "tokenizer/bpe.h"

namespace spmd {

enum class SftFormat { kPromptCompletion, kChat };
enum class TrainOn { kAssistant, kCompletion, kAll };

const char* format_name(SftFormat f);
const char* train_on_name(TrainOn t);

struct SftExample {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> targets;  // 1 = target, one per id
};

class SftEncoder {
 public:
  // UsageError when train_on does not fit the format (assistant is for chats, completion for
  // prompt/completion rows) or the tokenizer lacks a token the rendering needs.
  SftEncoder(const BpeTokenizer& tokenizer, SftFormat format, TrainOn train_on, std::optional<ChatTemplate> tmpl);

  // One row; UsageError prefixed with `where` (file:line) for a line that is not JSON, a row of
  // the wrong shape, an unknown role, or a row without any target.
  SftExample encode_row(std::string_view line, const std::string& where) const;

  // The id that ends an example (<|endoftext|>, or Llama 3's <|end_of_text|>): prompt/completion's
  // last target, the separator between packed examples and the padding of a window.
  int32_t document_end() const { return document_end_; }
  const std::optional<ChatTemplate>& chat_template() const { return tmpl_; }

  // Tokenizes `text` and marks the tokens overlapping `spans` (sorted [begin, end) byte ranges).
  SftExample tokenize_marked(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans) const;

 private:
  SftExample encode_chat(const std::string& row_text, const std::string& where) const;
  SftExample encode_prompt_completion(const std::string& row_text, const std::string& where) const;

  const BpeTokenizer& tokenizer_;
  SftFormat format_;
  TrainOn train_on_;
  std::optional<ChatTemplate> tmpl_;
  int32_t document_end_ = -1;
  int32_t start_id_ = -1;  // a start-of-text token before each prompt/completion example (Llama 3), else -1
};

// The id of a special token found in text by its content, or -1.
int32_t added_token_id(const BpeTokenizer& tokenizer, std::string_view content);

}  // namespace spmd
