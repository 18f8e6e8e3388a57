// Rendering ChatML and Llama 3 conversations (see chat_render.h).
#include "chat/chat_render.h"

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace spmd {
namespace {

constexpr const char* kLlama3Bos = "<|begin_of_text|>";

// Python's str.isspace() for one code point.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

void check_role(const std::string& role) {
  SPMD_CHECK(role == "system" || role == "user" || role == "assistant",
             "unknown role \"{}\" (the chat template knows system, user and assistant)", role);
}

// Appends `content` + `end`; an assistant's both are a generation span.
void append_turn(RenderedChat& out, const std::string& role, const std::string& content, const char* end) {
  const size_t begin = out.text.size();
  out.text += content;
  out.text += end;
  if (role == "assistant") out.assistant_spans.emplace_back(begin, out.text.size());
}

RenderedChat render_chatml(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages) {
  RenderedChat out;
  if (tmpl.default_system && (messages.empty() || messages[0].role != "system"))
    out.text += "<|im_start|>system\n" + *tmpl.default_system + "<|im_end|>\n";
  for (const ChatMessage& m : messages) {
    check_role(m.role);
    out.text += "<|im_start|>" + m.role + "\n";
    append_turn(out, m.role, m.content, "<|im_end|>");
    out.text += "\n";
  }
  return out;
}

RenderedChat render_llama3(const std::vector<ChatMessage>& messages) {
  RenderedChat out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_role(m.role);
    if (i == 0) out.text += kLlama3Bos;
    out.text += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    append_turn(out, m.role, jinja_trim(m.content), "<|eot_id|>");
  }
  return out;
}

}  // namespace

std::string jinja_trim(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t begin = 0, end = 0;  // the first and one past the last non-space byte
  bool seen = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = p[pos];
    size_t used = cp < 0x80 ? 1 : utf8_decode_one(p + pos, text.size() - pos, cp);
    if (used == 0) used = 1, cp = 0xFFFD;  // not whitespace
    if (!is_python_space(cp)) {
      if (!seen) begin = pos;
      seen = true;
      end = pos + used;
    }
    pos += used;
  }
  return seen ? text.substr(begin, end - begin) : std::string();
}

RenderedChat render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages) {
  return tmpl.family == ChatFamily::kChatMl ? render_chatml(tmpl, messages) : render_llama3(messages);
}

std::vector<std::string> chat_special_tokens(ChatFamily family) {
  if (family == ChatFamily::kChatMl) return {"<|im_start|>", "<|im_end|>"};
  return {kLlama3Bos, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
}

std::string chat_generation_prompt(ChatFamily family) {
  return family == ChatFamily::kChatMl ? "<|im_start|>assistant\n" : "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

}  // namespace spmd
