// `spmd-train sample`: text from a checkpoint on any mesh. The launcher checks the inputs once,
// then every rank loads its shards of the parameters and decodes together; rank 0 writes the text.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/meta.h"
#include "generate/generate.h"

namespace spmd {

struct SampleOptions {
  std::string checkpoint;   // a step directory
  std::string prompt;       // "" : a newline starts the text (and is not printed)
  std::string chat;         // a user message, rendered with the fine-tuning data's chat template; the
                            // reply is printed up to its end-of-turn token
  GenerateOptions generate;
  std::string text_out;     // a file for the text; "" : stdout
};

// The checkpoint's own config (or `config_path`'s) with `overrides`, set up for decoding: a
// `layers` rule is dropped (every rank holds every block), one microbatch.
Config sampling_config(const std::string& checkpoint, const std::string& config_path,
                       const std::vector<std::string>& overrides);

// The tokenizer the checkpoint carries, else the one beside data.train. UsageError when neither.
DatasetMeta sampling_tokenizer(const Config& config, const std::string& checkpoint);

// The prompt's tokens (a newline for an empty prompt), after the start token for a tokenizer
// whose documents begin with one (Llama 3's <|begin_of_text|>). UsageError for text the vocabulary lacks.
std::vector<int64_t> prompt_tokens(const DatasetMeta& tokenizer, const std::string& prompt);

// --chat's tokens: `message` as the user's turn in the chat template the tokenizer's fine-tuning
// data was prepared with (meta.json's fine_tuning.chat_template), then the assistant's header.
// UsageError when the data was not prepared from chats. `end_of_turn` is set to the id the reply ends with.
std::vector<int64_t> chat_prompt_tokens(const DatasetMeta& tokenizer, const std::string& message, int64_t& end_of_turn);

// Everything that can be checked before any process starts (UsageError): the options, the
// checkpoint's index, the tokenizer, the prompt.
void check_sampling_inputs(const Config& config, const SampleOptions& options);

// One rank of a sampling run. Returns the exit code.
int run_sampling(const Config& config, const RendezvousInfo& rendezvous, bool single_process,
                 const SampleOptions& options);

}  // namespace spmd
