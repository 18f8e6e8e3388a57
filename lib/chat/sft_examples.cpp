// Rows to ids and targets (see sft_examples.h).
#include "chat/sft_examples.h"

#include <nlohmann/json.hpp>

#include "chat/chat_render.h"
#include "util/error.h"

namespace spmd {
namespace {

// The UsageError of one row, prefixed with where it is.
[[noreturn]] void bad_row(const std::string& where, const std::string& why) {
  throw UsageError(fmt::format("{}: {}", where, why));
}

nlohmann::json parse_row(const std::string& text, const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) bad_row(where, "not valid JSON");
  if (!j.is_object()) bad_row(where, "not a JSON object");
  return j;
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where, const char* shape) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) bad_row(where, fmt::format("no string field \"{}\" ({})", key, shape));
  return it->get<std::string>();
}

}  // namespace

const char* format_name(SftFormat f) { return f == SftFormat::kChat ? "chat" : "prompt-completion"; }

const char* train_on_name(TrainOn t) {
  switch (t) {
    case TrainOn::kAssistant: return "assistant";
    case TrainOn::kCompletion: return "completion";
    case TrainOn::kAll: return "all";
  }
  return "?";
}

int32_t added_token_id(const BpeTokenizer& tokenizer, std::string_view content) {
  for (int32_t id : tokenizer.rules().added_in_text)
    if (tokenizer.tokens()[static_cast<size_t>(id)].bytes == content) return id;
  const int32_t eot = tokenizer.eot_id();  // GPT-2's files: <|endoftext|> is special without text rules
  if (eot >= 0 && tokenizer.tokens()[static_cast<size_t>(eot)].bytes == content) return eot;
  return -1;
}

SftEncoder::SftEncoder(const BpeTokenizer& tokenizer, SftFormat format, TrainOn train_on,
                       std::optional<ChatTemplate> tmpl)
    : tokenizer_(tokenizer), format_(format), train_on_(train_on), tmpl_(std::move(tmpl)) {
  SPMD_CHECK(train_on != (format == SftFormat::kChat ? TrainOn::kCompletion : TrainOn::kAssistant),
             "--train-on {} does not fit --format {} (chats: assistant or all; prompt-completion: completion or all)",
             train_on_name(train_on), format_name(format));
  SPMD_CHECK(format != SftFormat::kChat || tmpl_.has_value(), "--format chat needs the tokenizer's chat template");
  if (tmpl_)
    for (const std::string& special : chat_special_tokens(tmpl_->family))
      SPMD_CHECK(added_token_id(tokenizer, special) >= 0,
                 "{}: the chat template writes {}, which the tokenizer does not hold as an added token (tokenizer.json's "
                 "added_tokens)", tmpl_->origin, special);
  if (tokenizer.rules().eot_starts_documents) {
    start_id_ = tokenizer.eot_id();
    document_end_ = added_token_id(tokenizer, "<|end_of_text|>");
    SPMD_CHECK(document_end_ >= 0, "the tokenizer starts documents with a start token but has no <|end_of_text|> to end "
               "an example with");
  } else {
    document_end_ = tokenizer.eot_id();
  }
}

SftExample SftEncoder::tokenize_marked(const std::string& text,
                                       const std::vector<std::pair<size_t, size_t>>& spans) const {
  SftExample out;
  size_t offset = 0, span = 0;
  for (int32_t id : tokenizer_.encode(text)) {
    const size_t begin = offset, end = offset + tokenizer_.tokens()[static_cast<size_t>(id)].bytes.size();
    offset = end;
    while (span < spans.size() && spans[span].second <= begin) ++span;  // spans wholly before the token
    const bool target = span < spans.size() && spans[span].first < end;
    out.ids.push_back(static_cast<uint32_t>(id));
    out.targets.push_back(target ? 1 : 0);
  }
  SPMD_ASSERT(offset == text.size(), "tokenize_marked: tokens cover {} of {} bytes", offset, text.size());
  return out;
}

SftExample SftEncoder::encode_chat(const std::string& row_text, const std::string& where) const {
  const nlohmann::json j = parse_row(row_text, where);
  auto it = j.find("messages");
  if (it == j.end() || !it->is_array() || it->empty())
    bad_row(where, "no \"messages\" list of {\"role\", \"content\"} (--format chat)");
  std::vector<ChatMessage> messages;
  for (const auto& m : *it) {
    if (!m.is_object()) bad_row(where, "a message is not a JSON object");
    messages.push_back({string_field(m, "role", where, "each message"), string_field(m, "content", where, "each message")});
  }
  RenderedChat chat;
  try {
    chat = render_chat(*tmpl_, messages);
  } catch (const UsageError& e) {
    bad_row(where, e.what());
  }
  return tokenize_marked(chat.text, chat.assistant_spans);
}

SftExample SftEncoder::encode_prompt_completion(const std::string& row_text, const std::string& where) const {
  const nlohmann::json j = parse_row(row_text, where);
  const std::string prompt = string_field(j, "prompt", where, "--format prompt-completion");
  const std::string completion = string_field(j, "completion", where, "--format prompt-completion");
  SftExample text = tokenize_marked(prompt + completion, {{prompt.size(), prompt.size() + completion.size()}});
  SftExample out;
  if (start_id_ >= 0) out.ids.push_back(static_cast<uint32_t>(start_id_)), out.targets.push_back(0);
  out.ids.insert(out.ids.end(), text.ids.begin(), text.ids.end());
  out.targets.insert(out.targets.end(), text.targets.begin(), text.targets.end());
  out.ids.push_back(static_cast<uint32_t>(document_end_));
  out.targets.push_back(1);
  return out;
}

SftExample SftEncoder::encode_row(std::string_view line, const std::string& where) const {
  const std::string row_text(line);
  SftExample out = format_ == SftFormat::kChat ? encode_chat(row_text, where) : encode_prompt_completion(row_text, where);
  if (train_on_ == TrainOn::kAll) out.targets.assign(out.ids.size(), 1);
  if (!out.targets.empty()) out.targets[0] = 0;  // nothing of the example predicts its first token
  bool any = false;
  for (uint8_t t : out.targets) any = any || t != 0;
  if (!any) bad_row(where, format_ == SftFormat::kChat ? "no target: the conversation has no assistant message"
                                                        : "no target: the row is too short to predict anything");
  return out;
}

}  // namespace spmd
