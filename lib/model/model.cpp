// The stack of blocks, the same for every family, and the one place that maps model.arch to a
// family's forward.
#include "model/model.h"

#include <ATen/record_function.h>
#include <fmt/format.h>

#include "model/gpt2.h"
#include "model/llama.h"
#include "model/params.h"
#include "util/error.h"

namespace spmd {

namespace {
const std::vector<std::string> kResidual{"batch", "seq", "embed"};
}  // namespace

at::Tensor Model::blocks(at::Tensor x, int64_t begin, int64_t end, ModelOps& ops, bool training,
                         const at::Tensor& document_starts) const {
  for (int64_t l = begin; l < end; ++l) {
    x = ops.constrain(x, kResidual);
    x = ops.block(x, [this, l, &ops, training, document_starts](const at::Tensor& in) {
      // The census's region (lib/census); inside the body, which a recompute runs again in backward.
      RECORD_USER_SCOPE(fmt::format("block.{}", l));  // the name is made only while a callback listens
      return block(in, l, ops, training, nullptr, document_starts);
    });
  }
  return x;
}

at::Tensor Model::head_loss(const at::Tensor& x, const at::Tensor& targets, ModelOps& ops) const {
  RECORD_USER_SCOPE("head");  // the census's region (lib/census)
  return ops.tied_head_loss(final_norm(ops.constrain(x, kResidual), ops), head_table(config_), targets);
}

at::Tensor Model::head_row_losses(const at::Tensor& x, const at::Tensor& targets, ModelOps& ops) const {
  return ops.tied_head_row_losses(final_norm(ops.constrain(x, kResidual), ops), head_table(config_), targets);
}

at::Tensor Model::next_token_logits(const at::Tensor& idx, ModelOps& ops, KvCache* cache) const {
  const int64_t first = cache ? cache->length : 0;
  SPMD_ASSERT(first + idx.size(1) <= config_.block_size, "decoding past block_size: {} + {} > {}", first,
              idx.size(1), config_.block_size);
  at::Tensor x = embed(idx, ops, /*training=*/false, first);
  for (int64_t l = 0; l < config_.n_layer; ++l) x = block(ops.constrain(x, kResidual), l, ops, false, cache, {});
  if (cache) cache->length += idx.size(1);
  const at::Tensor last = x.select(1, x.size(1) - 1);  // (B, C): only the newest position is needed
  return ops.tied_head_logits(final_norm(last, ops), head_table(config_));
}

std::unique_ptr<Model> make_model(const ModelConfig& config) {
  switch (config.arch) {
    case ModelArch::kGpt2: return std::make_unique<Gpt2>(config);
    case ModelArch::kLlama: return std::make_unique<Llama>(config);
  }
  return nullptr;
}

}  // namespace spmd
