// The decoding loop: which positions to feed, the cache, the choice of each token.
#include "generate/generate.h"

#include <ATen/core/grad_mode.h>

#include "parallel/parallel_ops.h"
#include "util/error.h"

namespace spmd {

namespace {
at::Tensor ids_tensor(std::vector<int64_t>::const_iterator begin, std::vector<int64_t>::const_iterator end,
                      c10::Device device) {
  std::vector<int64_t> ids(begin, end);
  return at::tensor(ids, at::kLong).view({1, -1}).to(device);
}
}  // namespace

std::vector<int64_t> generate(ShardedModel& model, const Model& net, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options, const std::function<void(int64_t)>& on_token) {
  SPMD_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  at::NoGradGuard no_grad;
  const int64_t block = model.layout().model.block_size;
  const c10::Device device = model.comm().device();
  std::vector<int64_t> tokens = prompt;
  KvCache cache;
  for (int64_t i = 0; i < options.tokens; ++i) {
    const int64_t size = static_cast<int64_t>(tokens.size());
    const bool slid = size > block;
    if (slid || !options.use_cache) cache.clear();
    const int64_t first = slid ? size - block : cache.length;  // the positions not yet in the cache
    ParallelOps ops(model, options.sampling.seed, /*step=*/0, {}, Remat::kNone, /*decoding=*/true);
    // A slid window is run whole, and its keys would be stale at the next token: no cache then.
    KvCache* kv = options.use_cache && !slid ? &cache : nullptr;
    at::Tensor logits = net.next_token_logits(ids_tensor(tokens.begin() + first, tokens.end(), device), ops, kv);
    at::Tensor row = logits[0];
    if (options.vocab_size > 0 && options.vocab_size < row.size(0)) row = row.narrow(0, 0, options.vocab_size);
    const int64_t next = choose_token(row, options.sampling, size);
    tokens.push_back(next);
    if (on_token) on_token(next);
  }
  return tokens;
}

}  // namespace spmd
