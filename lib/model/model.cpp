// The one place that maps model.arch to a family's forward.
#include "model/model.h"

#include "model/gpt2.h"
#include "model/llama.h"

namespace spmd {

std::unique_ptr<Model> make_model(const ModelConfig& config) {
  switch (config.arch) {
    case ModelArch::kGpt2: return std::make_unique<Gpt2>(config);
    case ModelArch::kLlama: return std::make_unique<Llama>(config);
  }
  return nullptr;
}

}  // namespace spmd
