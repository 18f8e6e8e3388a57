// Sampling: config and inputs, the sharded model from a checkpoint, the text out.
#include "generate/sample_run.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "chat/chat_render.h"
#include "chat/sft_examples.h"
#include "ckpt/checkpoint_restore.h"
#include "comm/backend.h"
#include "data/dataset_tokenizer.h"
#include "model/model.h"
#include "tokenizer/bpe.h"
#include "parallel/layout.h"
#include "parallel/sharded_model.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace spmd {

Config sampling_config(const std::string& checkpoint, const std::string& config_path,
                       const std::vector<std::string>& overrides) {
  Config config = config_path.empty()
                      ? parse_config(checkpoint_config_yaml(checkpoint), checkpoint + "/index.json (its config)", overrides)
                      : load_config(config_path, overrides);
  for (auto& rule : config.sharding_rules)
    if (rule.logical == "layers") rule.mesh_axes.clear();  // no stages: decoding is one position deep
  config.runtime.pipeline_layers.clear();
  config.runtime.virtual_stages = 1;  // an interleaved run's checkpoint samples unstaged too
  if (config.runtime.pipeline_schedule == PipelineSchedule::kInterleaved)
    config.runtime.pipeline_schedule = PipelineSchedule::kOneFOneB;
  config.train.microbatches = 1;
  return config;
}

namespace {
std::vector<int64_t> prompt_tokens_of_text(const DatasetMeta& tokenizer, const std::string& prompt) {
  try {
    return encode(tokenizer, prompt);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("--prompt: {}", e.what()));
  }
}
}  // namespace

DatasetMeta sampling_tokenizer(const Config& config, const std::string& checkpoint) {
  const std::string carried = checkpoint + "/tokenizer/meta.json";
  if (fs::exists(carried)) return read_meta(carried);
  const std::string beside_data = dataset_meta_path(tokenizer_data_path(config.data));
  SPMD_CHECK(!beside_data.empty(),
             "{}: the checkpoint carries no tokenizer (tokenizer/meta.json) and data.train ({}) has no meta.json "
             "beside it; point data.train at a dataset spmd-prepare wrote (--set data.train=DIR/train.bin)",
             checkpoint, config.data.train);
  return read_meta(beside_data);
}

std::vector<int64_t> prompt_tokens(const DatasetMeta& tokenizer, const std::string& prompt) {
  // A start-of-text token (Llama 3's <|begin_of_text|>) began every training document: so does
  // the prompt, as tokenizers' encode gives it.
  if (tokenizer.bpe != nullptr && tokenizer.bpe->rules().eot_starts_documents) {
    std::vector<int64_t> ids{tokenizer.eot_token};
    const std::vector<int64_t> text = prompt.empty() ? std::vector<int64_t>{} : prompt_tokens_of_text(tokenizer, prompt);
    if (!text.empty() && text.front() == tokenizer.eot_token) return text;
    ids.insert(ids.end(), text.begin(), text.end());
    return ids;
  }
  if (!prompt.empty()) return prompt_tokens_of_text(tokenizer, prompt);
  try {
    return encode(tokenizer, "\n");  // nanoGPT's start
  } catch (const UsageError&) {
    return {0};  // a character vocabulary without newlines: its first character
  }
}

std::vector<int64_t> chat_prompt_tokens(const DatasetMeta& tokenizer, const std::string& message, int64_t& end_of_turn) {
  const SftMeta& sft = tokenizer.sft;
  SPMD_CHECK(tokenizer.bpe != nullptr && !sft.chat_family.empty(),
             "--chat: the tokenizer's dataset was not prepared from chats (spmd-prepare --format chat writes the chat "
             "template it used into meta.json); use --prompt");
  ChatTemplate tmpl;
  tmpl.family = sft.chat_family == "llama3" ? ChatFamily::kLlama3 : ChatFamily::kChatMl;
  tmpl.default_system = sft.default_system;
  const RenderedChat chat = render_chat(tmpl, {{"user", message}});
  const std::string end = tmpl.family == ChatFamily::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
  end_of_turn = added_token_id(*tokenizer.bpe, end);
  return encode(tokenizer, chat.text + chat_generation_prompt(tmpl.family));
}

void check_sampling_inputs(const Config& config, const SampleOptions& options) {
  const auto& g = options.generate;
  SPMD_CHECK(g.sampling.temperature >= 0, "--temperature {}: must be 0 (greedy) or positive", g.sampling.temperature);
  SPMD_CHECK(g.sampling.top_k >= 0, "--top-k {}: must be 0 (all tokens) or positive", g.sampling.top_k);
  SPMD_CHECK(g.tokens >= 1, "--tokens {}: must be at least 1", g.tokens);
  checkpoint_config_yaml(options.checkpoint);  // an index is there and readable
  int64_t end_of_turn = -1;
  const DatasetMeta tokenizer = sampling_tokenizer(config, options.checkpoint);
  if (!options.chat.empty()) chat_prompt_tokens(tokenizer, options.chat, end_of_turn);
  else prompt_tokens(tokenizer, options.prompt);
}

namespace {
// Where rank 0's text goes: stdout (flushed per token), or a file the launcher prints.
std::FILE* open_text_sink(const SampleOptions& options) {
  if (options.text_out.empty()) return stdout;
  std::FILE* f = std::fopen(options.text_out.c_str(), "wb");
  if (!f) throw RuntimeError(fmt::format("cannot write {}", options.text_out));
  return f;
}
}  // namespace

int run_sampling(const Config& config, const RendezvousInfo& rendezvous, bool single_process,
                 const SampleOptions& options) {
  const DatasetMeta tokenizer = sampling_tokenizer(config, options.checkpoint);
  int64_t end_of_turn = -1;  // --chat: the reply is printed up to it
  const std::vector<int64_t> prompt = options.chat.empty() ? prompt_tokens(tokenizer, options.prompt)
                                                           : chat_prompt_tokens(tokenizer, options.chat, end_of_turn);
  bool reply_ended = false;
  const ResolvedRuntime runtime = resolve_runtime(config.runtime);
  ModelLayout layout = plan_layout(config);
  auto comm = single_process ? std::make_unique<Communicator>(layout.mesh, runtime)
                             : std::make_unique<Communicator>(rendezvous, layout.mesh, runtime);
  ShardedModel model(std::move(layout), *comm, static_cast<uint64_t>(config.train.seed));
  restore_parameters(model, options.checkpoint);
  const std::unique_ptr<Model> net = make_model(config.model);
  const bool leader = comm->rank() == 0;
  std::FILE* sink = leader ? open_text_sink(options) : nullptr;
  if (leader && !options.prompt.empty()) std::fputs(options.prompt.c_str(), sink);
  GenerateOptions generate_options = options.generate;
  generate_options.vocab_size = tokenizer.vocab_size;
  const auto start = std::chrono::steady_clock::now();
  generate(model, *net, prompt, generate_options, [&](int64_t token) {
    reply_ended = reply_ended || (end_of_turn >= 0 && token == end_of_turn);
    if (!leader || reply_ended) return;
    const std::string piece = decode(tokenizer, {token});
    std::fwrite(piece.data(), 1, piece.size(), sink);
    std::fflush(sink);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (leader) {
    std::fputc('\n', sink);
    if (sink != stdout) std::fclose(sink);
    fmt::print(stderr, "sampled {} tokens in {:.2f} s: {:.1f} tokens/s (mesh {}, kv cache {})\n", options.generate.tokens,
               seconds, static_cast<double>(options.generate.tokens) / seconds, model.layout().mesh.describe(),
               options.generate.use_cache ? "on" : "off");
  }
  comm->control().barrier();
  return 0;
}

}  // namespace spmd
