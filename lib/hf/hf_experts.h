// The routed experts' stacked weights (ours: h.{l}.moe.experts.gate and .up (E, C, I), .down
// (E, I, C)) in a Hugging Face file, in either layout transformers reads: one nn.Linear weight per
// expert, as save_pretrained writes them (mlp.experts.E.gate_proj.weight, Mixtral's
// block_sparse_moe.experts.E.w1/w3/w2.weight), or stacked as transformers 5 holds them in memory
// (experts.gate_up_proj (E, 2I, C), the gate's rows first, and experts.down_proj (E, C, I)).
// The export writes the first.
#pragma once
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ckpt/safetensors.h"
#include "hf/hf_weights.h"
#include "hf/name_map.h"
#include "model/params.h"

namespace spmd {

// h.{l}.moe.experts.gate, .up or .down.
bool is_expert_weights(const ParamInfo& info);

// The per-expert tensors (HF names, float32 (out, in)) one of our expert weights becomes.
std::vector<NamedTensor> expert_hf_tensors(const HfNameMap& map, const ParamInfo& info, const at::Tensor& ours);

// Where a file holds one of our expert weights.
struct HfExpertSource {
  std::vector<std::string> names;  // one per expert, or the one stacked tensor
  bool stacked = false;
  int64_t first_row = 0;  // stacked gate_up_proj: this weight's rows (gate [0, I), up [I, 2I))
  int64_t rows = 0;       // 0: all
};

// UsageError naming the file, the tensor, and both shapes (or the missing tensor) when the file
// holds neither layout, or a dtype other than float32, bfloat16 or float16.
HfExpertSource find_expert_source(const HfNameMap& map, const HfWeights& file, const ParamInfo& info);

// Experts [first, first + count) of it in our layout (count, ...), float32.
at::Tensor read_experts(const HfWeights& file, const HfExpertSource& source, int64_t first, int64_t count);

}  // namespace spmd
