// A tokenizer folder's chat template, recognised by its structure: no Jinja engine renders it
// (none is packaged for C++ in Debian), so the template families the tool imports are rendered
// by chat_render.h exactly as transformers renders them, and any other template is refused.
// The template is DIR/chat_template.jinja (where transformers 5 writes it), else
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template} whose
// "default" entry is taken).
#pragma once
#include <optional>
#include <string>

namespace spmd {

enum class ChatFamily {
  kChatMl,  // <|im_start|>role\ncontent<|im_end|>\n: SmolLM2, Qwen2 and Qwen2.5 without tools
  kLlama3,  // <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent|trim<|eot_id|>
};

struct ChatTemplate {
  ChatFamily family = ChatFamily::kChatMl;
  // ChatML: the system turn written when the conversation has none (SmolLM2's, Qwen's), if any.
  std::optional<std::string> default_system;
  std::string origin;  // the file it came from, for messages
};

// "ChatML (SmolLM2, Qwen2, Qwen2.5 without tools) and Llama 3 (Meta-Llama-3-*-Instruct)".
const char* supported_chat_templates();

// Recognises `text` (a template's source). UsageError naming `origin` and the supported
// families when it is none of them.
ChatTemplate recognise_chat_template(const std::string& text, const std::string& origin);

// The template of a tokenizer folder (see above). UsageError when there is none or it is not
// recognised.
ChatTemplate read_chat_template(const std::string& tokenizer_dir);

}  // namespace spmd
