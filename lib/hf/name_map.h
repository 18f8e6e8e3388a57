// How a model family's parameters appear in a Hugging Face checkpoint, as data: one map per
// family that both the export and the import (train.init_from) read, so each is the other's exact
// inverse. GPT-2's dense weights are (in, out) like its Conv1D already; only the attention tensors
// fold their (heads, head_dim) dims together, and the vocabulary has no padding. A tensor's bytes
// are the same in both layouts: a reshape, never a transpose.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "model/params.h"

namespace spmd {

// One config.json size and the model.* key it must equal.
struct HfConfigSize {
  std::string hf_key;     // "n_embd"
  std::string model_key;  // "model.n_embd"
  int64_t ModelConfig::*value;
};

struct HfNameMap {
  std::string family;                                     // "GPT-2", for messages
  std::string prefix;                                     // "transformer.": what the bare names lack
  std::vector<std::pair<std::string, std::string>> renamed;  // our name -> HF name without the prefix
  std::vector<std::string> buffer_suffixes;               // tensors in the file that are not parameters
  std::string tied_head;                                  // the LM head's name when it copies the embedding
  std::vector<HfConfigSize> config_sizes;                 // config.json keys checked against model.*
};

// GPT2LMHeadModel's state dict.
const HfNameMap& gpt2_hf_map();

// Our name -> the HF name ("h.0.attn.c_attn.weight" -> "transformer.h.0.attn.c_attn.weight";
// "wte" -> "transformer.wte.weight").
std::string hf_name(const HfNameMap& map, const std::string& param);

// The HF shape: padding dropped, dense weights 2-D (in, out), biases 1-D.
std::vector<int64_t> hf_shape(const ParamInfo& info);

// Our global shape without padding (the HF tensor's bytes viewed in our dims).
std::vector<int64_t> unpadded_shape(const ParamInfo& info);

}  // namespace spmd
