// The stack of blocks, the same for every family, and the one place that maps model.arch to a
// family's forward.
#include "model/model.h"

#include "model/gpt2.h"
#include "model/llama.h"

namespace spmd {

at::Tensor Model::blocks(at::Tensor x, int64_t begin, int64_t end, ModelOps& ops, bool training,
                         const at::Tensor& document_starts) const {
  static const std::vector<std::string> residual{"batch", "seq", "embed"};
  for (int64_t l = begin; l < end; ++l) {
    x = ops.constrain(x, residual);
    x = ops.block(x, [this, l, &ops, training, document_starts](const at::Tensor& in) {
      return block(in, l, ops, training, nullptr, document_starts);
    });
  }
  return x;
}

std::unique_ptr<Model> make_model(const ModelConfig& config) {
  switch (config.arch) {
    case ModelArch::kGpt2: return std::make_unique<Gpt2>(config);
    case ModelArch::kLlama: return std::make_unique<Llama>(config);
  }
  return nullptr;
}

}  // namespace spmd
