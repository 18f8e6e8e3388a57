// The Llama family's parameter table (model/params.h dispatches here for model.arch llama).
#pragma once
#include "model/params.h"

namespace spmd {

// wte [V, C]; per layer attn_norm [C], attn.q [C, H, D], attn.k and attn.v [C, Hkv, D],
// attn.o [H, D, C], mlp_norm [C], mlp.gate and mlp.up [C, F], mlp.down [F, C]; ln_f [C];
// lm_head [V, C] when untied. No biases.
std::vector<ParamInfo> llama_param_table(const ModelConfig& config, int64_t padded_vocab);
std::vector<SizeSource> llama_size_sources(const ModelConfig& config);

}  // namespace spmd
