// GPT-2's parameter table (model/params.h dispatches here for model.arch gpt2).
#pragma once
#include "model/params.h"

namespace spmd {

std::vector<ParamInfo> gpt2_param_table(const ModelConfig& config, int64_t padded_vocab);
std::vector<SizeSource> gpt2_size_sources(const ModelConfig& config);

}  // namespace spmd
