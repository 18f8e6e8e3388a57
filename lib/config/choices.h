// The config's named choices as values: parsed once by the config loader, compared as enums
// everywhere else. name_of gives a value's YAML spelling, the one string messages, JSON outputs,
// plan labels and the resolved config print. No dependencies beyond the standard library, so
// lib/kernels can take a MatmulDtype without knowing about the config.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace spmd {

// runtime.pipeline_schedule: the order of microbatch passes on each pipeline stage.
enum class PipelineSchedule { kOneFOneB, kGPipe, kInterleaved };
// runtime.remat: what the backward recomputes instead of keeping.
enum class Remat { kNone, kSelective, kFull };
// runtime.context_exchange: how context parallelism's attention gets the other ranks' keys and values.
enum class ContextExchange { kAllGather, kRing };
// runtime.cpu_kernels: on a CPU, the fused CPU kernels (fused) or the device-generic ops a GPU runs
// (generic: libtorch's SDPA and fused AdamW, the unfused elementwise ops, bf16 products, the update
// decided on the device), so the GPU's code path runs and is tested on a CPU.
enum class CpuKernels { kFused, kGeneric };
// model.matmul_dtype: the operand dtype of the dense products and the LM head.
enum class MatmulDtype { kFloat32, kBFloat16 };
// model.arch: the model family (lib/model/model.h; docs/models.md).
enum class ModelArch { kGpt2, kLlama };
// train.lr_schedule: the learning rate's course over the run (optim/lr_schedule.h).
enum class LrSchedule { kCosine, kWsd, kLinear, kConstant };
// train.decay_shape: how a warmup-stable-decay schedule's decay falls to min_lr.
enum class DecayShape { kLinear, kCosine, kOneMinusSqrt };
// train.optimizer: AdamW for every parameter, or Muon for the blocks' matrices and AdamW for the rest.
enum class Optimizer { kAdamW, kMuon };
// train.muon.adjust_lr_fn: torch.optim.Muon's learning-rate scaling by the matrix's shape.
enum class MuonAdjustLr { kOriginal, kMatchRmsAdamW };

// The trailing returns are unreachable (every value has a case); they keep -Wreturn-type quiet.
inline std::string name_of(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kOneFOneB: return "1f1b";
    case PipelineSchedule::kGPipe: return "gpipe";
    case PipelineSchedule::kInterleaved: return "interleaved";
  }
  return "?";
}

inline std::string name_of(Remat remat) {
  switch (remat) {
    case Remat::kNone: return "none";
    case Remat::kSelective: return "selective";
    case Remat::kFull: return "full";
  }
  return "?";
}

inline std::string name_of(ContextExchange exchange) {
  switch (exchange) {
    case ContextExchange::kAllGather: return "all_gather";
    case ContextExchange::kRing: return "ring";
  }
  return "?";
}

inline std::string name_of(CpuKernels kernels) {
  switch (kernels) {
    case CpuKernels::kFused: return "fused";
    case CpuKernels::kGeneric: return "generic";
  }
  return "?";
}

inline std::string name_of(MatmulDtype dtype) {
  switch (dtype) {
    case MatmulDtype::kFloat32: return "float32";
    case MatmulDtype::kBFloat16: return "bfloat16";
  }
  return "?";
}

inline std::string name_of(ModelArch arch) {
  switch (arch) {
    case ModelArch::kGpt2: return "gpt2";
    case ModelArch::kLlama: return "llama";
  }
  return "?";
}

inline std::string name_of(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::kCosine: return "cosine";
    case LrSchedule::kWsd: return "wsd";
    case LrSchedule::kLinear: return "linear";
    case LrSchedule::kConstant: return "constant";
  }
  return "?";
}

inline std::string name_of(DecayShape shape) {
  switch (shape) {
    case DecayShape::kLinear: return "linear";
    case DecayShape::kCosine: return "cosine";
    case DecayShape::kOneMinusSqrt: return "1-sqrt";
  }
  return "?";
}

inline std::string name_of(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kAdamW: return "adamw";
    case Optimizer::kMuon: return "muon";
  }
  return "?";
}

inline std::string name_of(MuonAdjustLr adjust) {
  switch (adjust) {
    case MuonAdjustLr::kOriginal: return "original";
    case MuonAdjustLr::kMatchRmsAdamW: return "match_rms_adamw";
  }
  return "?";
}

// The value among `values` that name_of spells `name`, or nullopt: the config loader's parse.
template <class E>
std::optional<E> parse_choice(const std::string& name, const std::vector<E>& values) {
  for (E value : values)
    if (name_of(value) == name) return value;
  return std::nullopt;
}

}  // namespace spmd
