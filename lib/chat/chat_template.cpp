// Finding and recognising a chat template (see chat_template.h).
#include "chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace spmd {
namespace {

bool has(const std::string& text, const char* piece) { return text.find(piece) != std::string::npos; }

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPMD_CHECK(in.good(), "{}: cannot read", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A Jinja string literal's escape (after the backslash) as the character it stands for.
char unescaped_jinja_char(char c) {
  switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    default: return c;  // \\ \' \"
  }
}

// The default system turn of a ChatML template: the first string literal that writes
// "<|im_start|>system\n" and then text up to "<|im_end|>" with nothing spliced in.
std::optional<std::string> chatml_default_system(const std::string& text) {
  const std::string head = "<|im_start|>system";
  for (size_t at = text.find(head); at != std::string::npos; at = text.find(head, at + 1)) {
    const size_t quote_at = text.find_last_of("'\"", at);
    if (quote_at == std::string::npos) continue;
    const char quote = text[quote_at];
    std::string out;
    size_t pos = at + head.size();
    bool closed = false;
    for (; pos < text.size(); ++pos) {
      if (text.compare(pos, 10, "<|im_end|>") == 0) break;
      if (text[pos] == quote) {
        closed = true;
        break;
      }
      if (text[pos] == '\\' && pos + 1 < text.size()) out += unescaped_jinja_char(text[++pos]);
      else out += text[pos];
    }
    if (closed || pos >= text.size() || out.empty() || out[0] != '\n') continue;
    return out.substr(1);
  }
  return std::nullopt;
}

UsageError unsupported(const std::string& origin, const std::string& why) {
  return UsageError(fmt::format("{}: {}; spmd-prepare renders these chat templates: {}", origin, why,
                                supported_chat_templates()));
}

}  // namespace

const char* supported_chat_templates() {
  return "ChatML (SmolLM2, Qwen2, Qwen2.5 without tools) and Llama 3 (Meta-Llama-3-*-Instruct), "
         "recognised by their structure (a copy may add {% generation %} markers or change ChatML's default system turn)";
}

ChatTemplate recognise_chat_template(const std::string& text, const std::string& origin) {
  ChatTemplate t;
  t.origin = origin;
  const bool loops = has(text, "for message in") && has(text, "content") && has(text, "role");
  if (!loops) throw unsupported(origin, "the chat template does not write each message's role and content");
  const bool chatml = has(text, "<|im_start|>") && has(text, "<|im_end|>");
  const bool llama3 = has(text, "<|start_header_id|>") && has(text, "<|end_header_id|>") && has(text, "<|eot_id|>");
  if (chatml && !llama3) {
    if (has(text, "reasoning_content") || has(text, "<think>"))
      throw unsupported(origin, "a ChatML template that rewrites reasoning (<think>) turns is not supported");
    t.family = ChatFamily::kChatMl;
    t.default_system = chatml_default_system(text);
    return t;
  }
  if (llama3 && !chatml) {
    if (has(text, "Cutting Knowledge Date") || has(text, "date_string") || has(text, "strftime_now"))
      throw unsupported(origin, "a Llama 3.1/3.2 template (a dated system turn, tools) is not supported");
    if (!has(text, "trim") || !(has(text, "bos_token") || has(text, "<|begin_of_text|>")))
      throw unsupported(origin, "a Llama 3 style template without bos_token or | trim is not Llama 3's");
    t.family = ChatFamily::kLlama3;
    return t;
  }
  throw unsupported(origin, "the chat template is of no family spmd-prepare knows");
}

ChatTemplate read_chat_template(const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  const fs::path jinja = fs::path(tokenizer_dir) / "chat_template.jinja";
  if (fs::exists(jinja)) return recognise_chat_template(read_whole_file(jinja.string()), jinja.string());
  const fs::path config = fs::path(tokenizer_dir) / "tokenizer_config.json";
  SPMD_CHECK(fs::exists(config), "{}: holds neither chat_template.jinja nor tokenizer_config.json: a chat needs its "
             "tokenizer's chat template", tokenizer_dir);
  const nlohmann::json j = nlohmann::json::parse(read_whole_file(config.string()), nullptr, false);
  SPMD_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", config.string());
  const nlohmann::json field = j.value("chat_template", nlohmann::json());
  if (field.is_string()) return recognise_chat_template(field.get<std::string>(), config.string());
  if (field.is_array())
    for (const auto& entry : field)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return recognise_chat_template(entry["template"].get<std::string>(), config.string() + ": chat_template[default]");
  throw UsageError(fmt::format("{}: no chat_template (a string, or a list with a \"default\" entry), and no "
                               "chat_template.jinja beside it", config.string()));
}

}  // namespace spmd
