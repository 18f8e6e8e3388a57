// Autoregressive generation with a sharded GPT-2: every rank of the mesh runs it together (the
// forward's collectives), all with the same arguments, and all get the same tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"
#include "parallel/sharded_model.h"
#include "generate/token_sampler.h"

namespace spmd {

struct GenerateOptions {
  int64_t tokens = 200;    // new tokens
  SamplingOptions sampling;
  bool use_cache = true;   // false: every token runs the whole context from position 0
  int64_t vocab_size = 0;  // ids the tokenizer knows (model.vocab_size may be larger); 0: all
};

// Continues `prompt` (at least one token) by options.tokens tokens; on_token(id) after each.
// The context is the last block_size tokens (nanoGPT's crop). With learned positions a slid
// window moves every token's position, so past block_size each token runs the whole window.
std::vector<int64_t> generate(ShardedModel& model, const Model& net, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options, const std::function<void(int64_t)>& on_token);

}  // namespace spmd
