// How our GPT-2 parameters appear in a Hugging Face GPT-2 checkpoint (GPT2LMHeadModel's state
// dict): one mapping that both the export and the import (train.init_from) use, so each is the
// other's exact inverse. Our dense weights are (in, out) like GPT-2's Conv1D already; only the
// attention tensors fold their (heads, head_dim) dims together, and the vocabulary has no padding.
// A tensor's bytes are the same in both layouts: a reshape, never a transpose.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt2_params.h"

namespace spmd {

// "h.0.attn.c_attn.weight" -> "transformer.h.0.attn.c_attn.weight"; "wte" -> "transformer.wte.weight".
std::string hf_gpt2_name(const std::string& param);

// The HF shape: padding dropped, dense weights 2-D (in, out), biases 1-D.
std::vector<int64_t> hf_gpt2_shape(const ParamInfo& info);

// Our global shape without padding (the HF tensor's bytes viewed in our dims).
std::vector<int64_t> unpadded_shape(const ParamInfo& info);

}  // namespace spmd
