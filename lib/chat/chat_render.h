// A conversation rendered as its chat template renders it (transformers' apply_chat_template with
// add_generation_prompt false), with the byte ranges an assistant turn's
// {% generation %} block would cover: each assistant message's content and its end-of-turn token
// (<|im_end|>, <|eot_id|>), not the role header before it nor the newline after it.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_template.h"

namespace spmd {

struct ChatMessage {
  std::string role, content;
};

struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> assistant_spans;  // [begin, end) byte ranges of `text`, in order
};

// UsageError (without a file name: the caller adds file:line) for a role the family does not
// know; ChatML and Llama 3 know system, user and assistant.
RenderedChat render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages);

// The special tokens a family's rendering writes: the tokenizer must find them in text.
std::vector<std::string> chat_special_tokens(ChatFamily family);

// The generation prompt that asks the model for the assistant's turn ("<|im_start|>assistant\n").
std::string chat_generation_prompt(ChatFamily family);

// Python's str.strip() (Jinja's trim): Unicode whitespace off both ends of UTF-8 text.
std::string jinja_trim(const std::string& text);

}  // namespace spmd
