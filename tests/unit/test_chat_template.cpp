// Chat templates recognised by their structure (ChatML with or without a default system turn,
// Llama 3; Llama 3.1's dated system turn and unknown templates refused, naming the file), their
// rendering with the assistant spans, and the packing of examples into windows.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "chat/chat_render.h"
#include "chat/chat_template.h"
#include "chat/sft_pack.h"
#include "util/error.h"

namespace {

using spmd::ChatFamily;

const std::string kQwenLike =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}";
const std::string kPlainChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}";
const std::string kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}";

}  // namespace

TEST_CASE("chat template: ChatML's default system turn, Llama 3, and refusals naming the file") {
  const spmd::ChatTemplate qwen = spmd::recognise_chat_template(kQwenLike, "q.jinja");
  CHECK(qwen.family == ChatFamily::kChatMl);
  REQUIRE(qwen.default_system.has_value());
  CHECK(*qwen.default_system == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  const spmd::ChatTemplate plain = spmd::recognise_chat_template(kPlainChatMl, "p.jinja");
  CHECK(plain.family == ChatFamily::kChatMl);
  CHECK(!plain.default_system.has_value());
  CHECK(spmd::recognise_chat_template(kLlama3, "l.jinja").family == ChatFamily::kLlama3);
  CHECK_THROWS_WITH_AS(spmd::recognise_chat_template(kLlama3 + "Cutting Knowledge Date: December 2023", "l31.jinja"),
                       doctest::Contains("l31.jinja: a Llama 3.1/3.2 template"), spmd::UsageError);
  CHECK_THROWS_WITH_AS(spmd::recognise_chat_template("{% for message in messages %}{{ message.role }}: "
                                                     "{{ message.content }}{% endfor %}", "x.jinja"),
                       doctest::Contains("x.jinja: the chat template is of no family"), spmd::UsageError);
}

TEST_CASE("chat template: rendering with the assistant spans, the default system turn, trim, unknown roles") {
  const spmd::ChatTemplate qwen = spmd::recognise_chat_template(kQwenLike, "q.jinja");
  const spmd::RenderedChat chat = spmd::render_chat(qwen, {{"user", "hi"}, {"assistant", "yo"}});
  CHECK(chat.text ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
  REQUIRE(chat.assistant_spans.size() == 1);
  CHECK(chat.text.substr(chat.assistant_spans[0].first, chat.assistant_spans[0].second - chat.assistant_spans[0].first) ==
        "yo<|im_end|>");
  const spmd::RenderedChat llama =
      spmd::render_chat(spmd::recognise_chat_template(kLlama3, "l"), {{"user", " a\n"}, {"assistant", "\u00a0b "}});
  CHECK(llama.text ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nb<|eot_id|>");
  CHECK_THROWS_WITH_AS(spmd::render_chat(qwen, {{"tool", "x"}}), doctest::Contains("unknown role \"tool\""),
                       spmd::UsageError);
}

TEST_CASE("chat packing: a separator between examples, no straddling, padding that is never a target") {
  spmd::SftPacker packer(8, 0, true);
  packer.add({{5, 6, 7}, {0, 1, 1}});
  packer.add({{8, 9, 10}, {0, 0, 1}});  // 3 + separator + 3 = 7 <= 8
  packer.add({{11, 12}, {0, 1}});       // 7 + 1 + 2 > 8: the next window
  packer.add({{13, 0}, {0, 1}});        // ends with the separator id itself
  packer.add({{14, 15}, {0, 1}});       // so no separator before this one
  packer.finish();
  CHECK(packer.windows() == 2);
  CHECK((packer.ids() == std::vector<uint32_t>{5, 6, 7, 0, 8, 9, 10, 0, 11, 12, 0, 13, 0, 14, 15, 0}));
  CHECK((packer.targets() == std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 0}));
  spmd::SftPacker unpacked(8, 0, false);
  unpacked.add({{5, 6, 7}, {0, 1, 1}});
  unpacked.add({{8, 9}, {0, 1}});
  unpacked.finish();
  CHECK((unpacked.ids() == std::vector<uint32_t>{5, 6, 7, 0, 0, 0, 0, 0, 8, 9, 0, 0, 0, 0, 0, 0}));
}
