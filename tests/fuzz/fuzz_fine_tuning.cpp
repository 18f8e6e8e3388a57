// Fine-tuning rows come from anywhere: mutated chat and prompt/completion JSON Lines (broken
// lines, wrong types, unknown roles, invalid UTF-8, special tokens written in the text) go through
// prepare_sft as spmd-prepare --format runs it, with a byte-level tokenizer folder and a ChatML
// template; the outcomes allowed are success or a UsageError naming the file.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chat/prepare_sft.h"
#include "fuzz_support.h"
#include "test_support.h"
#include "tokenizer/byte_unicode.h"

namespace {

using namespace spmd::fuzz;

// A tokenizer.json of the 256 bytes (no merges) with <|endoftext|>, <|im_start|> and <|im_end|>
// added, and SmolLM2's chat template beside it.
void write_chat_tokenizer(const std::string& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[spmd::bytes_to_unicode_string(std::string(1, static_cast<char>(b)))] = b;
  nlohmann::json added = nlohmann::json::array();
  const std::vector<std::string> specials{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back({{"id", 256 + i}, {"content", specials[i]}, {"special", true}, {"lstrip", false},
                     {"rstrip", false}, {"single_word", false}, {"normalized", false}});
  const nlohmann::json tok{{"version", "1.0"}, {"added_tokens", added}, {"normalizer", nullptr},
                           {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                              {"use_regex", true}}},
                           {"post_processor", nullptr}, {"decoder", {{"type", "ByteLevel"}}},
                           {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                                      {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                                      {"merges", nlohmann::json::array()}}}};
  spmd::test::write_file(dir + "/tokenizer.json", tok.dump());
  spmd::test::write_file(dir + "/chat_template.jinja",
                         "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                         "{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}"
                         "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                         "{% endfor %}");
}

}  // namespace

TEST_CASE("fine-tuning: mutated chat and prompt/completion rows through prepare_sft") {
  std::string chats, prompts;
  for (int i = 0; i < 60; ++i) {
    chats += fmt::format("{{\"messages\": [{{\"role\": \"user\", \"content\": \"question {} about caf\u00e9s\"}}, "
                         "{{\"role\": \"assistant\", \"content\": \"answer {} \\\"quoted\\\"\"}}]}}\n", i, i);
    prompts += fmt::format("{{\"prompt\": \"Q{}: \", \"completion\": \"A{} <|im_end|>\"}}\n", i, i);
  }
  static const std::vector<std::string> kInserts = {"\"", "{", "}", "\n", "\\", "\xff", "\xc3", "null", "[1]",
                                                    "\"role\": 5, ", "\"tool\"", "<|im_start|>", "[]", "\"messages\": {}, "};
  spmd::test::TempDir folder;
  write_chat_tokenizer(folder.path());
  Tally tally;
  constexpr int kCases = 200;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0x5f700000u + static_cast<uint64_t>(i));
    spmd::test::TempDir tmp;
    const bool chat = i % 2 == 0;
    std::string text = chat ? chats : prompts;
    for (int edits = 1 + static_cast<int>(rng.below(3)); edits > 0; --edits) {
      const size_t at = rng.below(text.size());
      if (rng.percent(50)) text.insert(at, rng.pick(kInserts));
      else text[at] = static_cast<char>(text[at] ^ (1 << rng.below(8)));
    }
    const std::string path = tmp.file("rows.jsonl");
    spmd::test::write_file(path, text);
    spmd::SftPrepareOptions options;
    options.inputs = {path};
    options.out_dir = tmp.file("out");
    options.tokenizer_dir = folder.path();
    options.format = chat ? spmd::SftFormat::kChat : spmd::SftFormat::kPromptCompletion;
    options.block_size = 24 + static_cast<int64_t>(rng.below(100));
    options.pack = rng.percent(80);
    options.val_fraction = rng.percent(50) ? 0.0 : 0.1;
    run_reader_case(tally, i, fmt::format("rows case {} ({})", i, chat ? "chat" : "prompt-completion"), {path},
                    [&] { spmd::prepare_sft(options); });
  }
  check_reader_pass(tally, kCases, "fine-tuning rows");
}
